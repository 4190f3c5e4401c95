package boltstore

import (
	"bytes"
	"encoding/binary"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/cardstore"
)

// sep separates the parts of a key. project ids cannot contain it
// (card.ValidateName), and the store refuses agent_turn_id and
// tool_call_id values that do, so every key splits one way only.
const sep = 0x00

// The kinds of a turn's records in the turnrecs bucket (schema version
// 4), the byte after the turn's base key (turnBase). A call's records
// share the call's range (kindCall, then the call id, sep and the call
// record's kind), so one call's claim and result sit side by side; the
// turn's summary sorts right after its newest index entry.
const (
	kindCall = 'c' // base 'c' tool_call_id sep callClaim|callResult
	kindSeq  = 's' // base 's' seq (8 bytes, big-endian) -> card_id
	kindInfo = 't' // base 't' -> turn summary JSON

	callClaim  = 'k' // the claim of the call's cardstore.CallKey
	callResult = 'r' // -> card_id of the call's tool.result
)

// join builds a key from its parts with sep between them, leaving room for
// extra more bytes.
func join(extra int, parts ...string) []byte {
	n := extra + len(parts) - 1
	for _, p := range parts {
		n += len(p)
	}
	k := make([]byte, 0, n)
	for i, p := range parts {
		if i > 0 {
			k = append(k, sep)
		}
		k = append(k, p...)
	}
	return k
}

// cardKey is the key of a card in the cards bucket.
func cardKey(projectID, cardID string) []byte { return join(0, projectID, cardID) }

// turnBase is project+0x00+turn+0x00: every turnrecs key of the turn
// starts with it, followed by a kind byte.
func turnBase(projectID, turnID string, extra int) []byte {
	return append(join(1+extra, projectID, turnID), sep)
}

// turnPrefix is the turn's base and kindSeq: every index entry of the
// turn starts with it and ends with an 8-byte sequence number.
func turnPrefix(projectID, turnID string) []byte {
	return append(turnBase(projectID, turnID, 9), kindSeq)
}

// turnKey appends the big-endian sequence number to a turn prefix.
func turnKey(prefix []byte, seq uint64) []byte {
	k := make([]byte, len(prefix)+8)
	copy(k, prefix)
	binary.BigEndian.PutUint64(k[len(prefix):], seq)
	return k
}

// callRecKey is the key of one of a call's records (callClaim,
// callResult) in the turnrecs bucket.
func callRecKey(projectID, turnID, toolCallID string, kind byte) []byte {
	k := append(turnBase(projectID, turnID, 3+len(toolCallID)), kindCall)
	k = append(k, toolCallID...)
	return append(k, sep, kind)
}

// resultKey is the key of a tool call's result in the turnrecs bucket.
func resultKey(projectID, turnID, toolCallID string) []byte {
	return callRecKey(projectID, turnID, toolCallID, callResult)
}

// turnInfoKey is the key of a turn's summary in the turnrecs bucket.
func turnInfoKey(projectID, turnID string) []byte {
	return append(turnBase(projectID, turnID, 1), kindInfo)
}

// outboxKey is the key of a call's entry in the outbox bucket.
func outboxKey(projectID, turnID, toolCallID string) []byte {
	return join(0, projectID, turnID, toolCallID)
}

// seqOf is the sequence number at the end of a turns key of prefix.
func seqOf(k, prefix []byte) uint64 { return binary.BigEndian.Uint64(k[len(prefix):]) }

// turnRec is a turnrecs key taken apart.
type turnRec struct {
	project, turn []byte
	kind          byte
	rest          []byte // after the kind byte
}

// splitTurnRec takes a turnrecs key apart; ok is false for a key of no
// layout. Project and turn ids hold no NUL, so the first two NULs end
// them.
func splitTurnRec(k []byte) (r turnRec, ok bool) {
	project, rest, ok := bytes.Cut(k, []byte{sep})
	if !ok {
		return r, false
	}
	turn, rest, ok := bytes.Cut(rest, []byte{sep})
	if !ok || len(rest) == 0 {
		return r, false
	}
	r = turnRec{project: project, turn: turn, kind: rest[0], rest: rest[1:]}
	switch r.kind {
	case kindSeq:
		return r, len(r.rest) == 8
	case kindInfo:
		return r, len(r.rest) == 0
	case kindCall:
		n := len(r.rest)
		return r, n >= 2 && r.rest[n-2] == sep && (r.rest[n-1] == callClaim || r.rest[n-1] == callResult)
	}
	return r, false
}

// claimSlot is the bucket and key of the claim stored under k (project
// 0x00 claim key): see claimSlotOf.
func claimSlot(recs, claims *bolt.Bucket, k []byte) (*bolt.Bucket, []byte) {
	if inRecs, key := claimSlotOf(k); inRecs {
		return recs, key
	}
	return claims, k
}

// claimSlotOf says where the claim stored under k (project 0x00 claim
// key) lives: the claim of a call's cardstore.CallKey among its turn's
// records (inRecs, under key; so the result's commit, which ends it,
// writes beside the result), every other claim in the claims bucket
// under k itself.
func claimSlotOf(k []byte) (inRecs bool, key []byte) {
	project, claimKey, ok := bytes.Cut(k, []byte{sep})
	if !ok {
		return false, k
	}
	ck, ok := cardstore.ParseCallKey(string(claimKey))
	if !ok {
		return false, k
	}
	return true, callRecKey(string(project), ck.AgentTurnID, ck.ToolCallID, callClaim)
}
