// Package determ derives ATLAS ids and timestamps from the tool call that
// causes them, never from randomness or the wall clock, so that replaying a
// turn (same project, tool_call_id and card time) reproduces its results.
package determ

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"
)

// hashLen is how many hex digits of the hash an id keeps: 64 bits, enough
// that two calls of one project never collide in practice.
const hashLen = 16

// Hash returns the first n hex digits of SHA-256 over the parts, each
// length-prefixed so that ("ab","c") and ("a","bc") differ.
func Hash(n int, parts ...string) string {
	h := sha256.New()
	var l [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(l[:], uint64(len(p)))
		h.Write(l[:])
		h.Write([]byte(p))
	}
	s := hex.EncodeToString(h.Sum(nil))
	if n > len(s) {
		n = len(s)
	}
	return s[:n]
}

// ID returns prefix_<16 hex digits> derived from the project, the call's
// tool_call_id and the index of the object within the call.
func ID(prefix, project, toolCallID string, index int) string {
	return prefix + "_" + Hash(hashLen, project, toolCallID, fmt.Sprint(index))
}

// CardID returns a card id (a canonical UUID, version 8 "custom") derived
// from the parts: writing the same card twice yields the same id, so the
// CardStore treats the second write as a no-op.
func CardID(parts ...string) string {
	b, _ := hex.DecodeString(Hash(32, parts...))
	b[6] = (b[6] & 0x0f) | 0x80 // version 8
	b[8] = (b[8] & 0x3f) | 0x80 // RFC 4122 variant
	s := hex.EncodeToString(b)
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}

// Time returns t in UTC, truncated to the second: the form every ATLAS
// timestamp takes (RFC 3339, "2024-01-15T10:30:00Z").
func Time(t time.Time) time.Time { return t.UTC().Truncate(time.Second) }

// Format writes t as an ATLAS timestamp.
func Format(t time.Time) string { return Time(t).Format(time.RFC3339) }
