package boltstore

import "encoding/binary"

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

// seqOf is the sequence number at the end of a turns key of prefix.
func seqOf(k, prefix []byte) uint64 { return binary.BigEndian.Uint64(k[len(prefix):]) }
