package boltstore

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// sep separates the parts of a key. project ids cannot contain it
// (card.ValidateName), and the store refuses agent_turn_id and
// tool_call_id values that do, so every key splits one way only.
const sep = 0x00

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

// turnPrefix is project+0x00+turn+0x00: every turns entry of the turn
// starts with it and ends with an 8-byte sequence number.
func turnPrefix(projectID, turnID string) []byte {
	return append(join(9, projectID, turnID), sep)
}

// turnKey appends the big-endian sequence number to a turn prefix.
func turnKey(prefix []byte, seq uint64) []byte {
	k := make([]byte, len(prefix)+8)
	copy(k, prefix)
	binary.BigEndian.PutUint64(k[len(prefix):], seq)
	return k
}

// resultKey is the key of a tool call's result in the results bucket.
func resultKey(projectID, turnID, toolCallID string) []byte {
	return join(0, projectID, turnID, toolCallID)
}

// invalid wraps cardstore.ErrInvalid with a message.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{cardstore.ErrInvalid}, args...)...)
}

// checkProject validates a project id argument.
func checkProject(projectID string) error {
	if err := card.ValidateName("project_id", projectID); err != nil {
		return fmt.Errorf("%w: %w", cardstore.ErrInvalid, err)
	}
	return nil
}

// checkCardID validates a card id argument.
func checkCardID(field, id string) error {
	if !card.ValidID(id) {
		return invalid("%s %q is not a canonical lower-case UUID", field, id)
	}
	return nil
}

// checkKeyPart validates an agent_turn_id or tool_call_id that becomes part
// of an index key: non-empty, at most card.MaxIDLen bytes, valid UTF-8
// (the canonical JSON would silently replace invalid bytes) and no NUL.
func checkKeyPart(field, s string) error {
	switch {
	case s == "":
		return invalid("%s is required", field)
	case len(s) > card.MaxIDLen:
		return invalid("%s is longer than %d bytes", field, card.MaxIDLen)
	case !utf8.ValidString(s):
		return invalid("%s %q is not valid UTF-8", field, s)
	case strings.IndexByte(s, 0) >= 0:
		return invalid("%s %q contains a NUL character", field, s)
	}
	return nil
}

// checkClaimString validates a claim key or holder.
func checkClaimString(field, s string) error {
	if s == "" {
		return invalid("%s is required", field)
	}
	if len(s) > cardstore.MaxKeyLen {
		return invalid("%s is %d bytes, longer than %d", field, len(s), cardstore.MaxKeyLen)
	}
	return nil
}
