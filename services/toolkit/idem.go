package toolkit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Records is where a catalogue keeps its call records: a key-value bucket
// of its state, written in the same transaction as the call's change.
type Records interface {
	Get(key string) (value []byte, found bool, err error)
	Put(key string, value []byte) error
}

// CallRecord is what an executed (or parked) call leaves behind, so that a
// second execution of the same call answers the same way.
type CallRecord struct {
	ToolName string          `json:"tool_name"`
	ArgsHash string          `json:"args_hash"`
	Result   json.RawMessage `json:"result"`
	// Receipt is the catalogue's own record of the call (its receipt, its
	// event), replayed with the result.
	Receipt json.RawMessage `json:"receipt"`
	// At is when the record was stored (the writer's clock; PutCall sets
	// it). Zero in a record an earlier version wrote. Purge removes a
	// record RecordMaxAge after it.
	At time.Time `json:"at,omitzero"`
}

// CallKey is the record key of a call: its turn and tool_call_id.
func CallKey(turn, toolCallID string) string { return turn + "\x00" + toolCallID }

// ArgsHash is the hash a record keeps of a call's arguments (compacted, so
// whitespace does not count).
func ArgsHash(args json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, args); err != nil {
		buf.Write(args)
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:8])
}

// GetCall reads the record of a call; nil when there is none.
func GetCall(r Records, turn, toolCallID string) (*CallRecord, error) {
	v, found, err := r.Get(CallKey(turn, toolCallID))
	if err != nil || !found {
		return nil, err
	}
	rec := &CallRecord{}
	if err := json.Unmarshal(v, rec); err != nil {
		return nil, fmt.Errorf("%w: call %s of turn %s: %w", ErrRecord, toolCallID, turn, err)
	}
	return rec, nil
}

// PutCall stores the record of a call, stamped with the time now when
// rec.At is zero.
func PutCall(r Records, turn, toolCallID string, rec CallRecord) error {
	if rec.At.IsZero() {
		rec.At = time.Now().UTC()
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return r.Put(CallKey(turn, toolCallID), raw)
}

// Replay checks that a recorded call is the one being made again (same
// tool, same arguments hash) and returns nil, or a bad_request naming the
// tool_call_id reuse.
func (rec *CallRecord) Replay(tool, hash, turn, toolCallID string) error {
	if rec.ToolName != tool || rec.ArgsHash != hash {
		return BadRequest("tool_call_id %q was already used in turn %q for a %s call with other arguments; give every call its own tool_call_id",
			toolCallID, turn, rec.ToolName)
	}
	return nil
}

// PutNew stores a new object under id. When id exists with the same
// encoding it returns existed=true (a replay); with another encoding it
// fails bad_request explaining the tool_call_id reuse.
func PutNew(r Records, id string, v any, toolCallID string) (existed bool, err error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	old, found, err := r.Get(id)
	if err != nil {
		return false, err
	}
	if found {
		if bytes.Equal(old, raw) {
			return true, nil
		}
		return false, BadRequest("the id %s derived from tool_call_id %q already names another object: tool_call_id was reused with different content; give every call its own tool_call_id", id, toolCallID)
	}
	return false, r.Put(id, raw)
}

// GetJSON reads the JSON object under id into v; found is false when
// absent.
func GetJSON(r Records, id string, v any) (found bool, err error) {
	raw, found, err := r.Get(id)
	if err != nil || !found {
		return false, err
	}
	return true, json.Unmarshal(raw, v)
}

// PutJSON writes v under id.
func PutJSON(r Records, id string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return r.Put(id, raw)
}

// Raw encodes v as JSON (nil when v cannot be encoded, which the plain
// structs catalogues pass never are).
func Raw(v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return raw
}
