package boltstore

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore"
)

// FuzzSplitTurnRec: splitTurnRec never panics, and every key the key
// builders make of ids the store accepts splits back into its parts; a
// call's claim key lands there too (claimSlot), other claim keys stay in
// the claims bucket under themselves (claimSlotOf).
func FuzzSplitTurnRec(f *testing.F) {
	f.Add([]byte("p\x00t\x00s12345678"), "p", "t", "c", uint64(1))
	f.Add([]byte("p\x00t\x00cc\x00r"), "proj", "turn/1", "call%2F", uint64(0))
	f.Add([]byte("\x00\x00t"), "a", "b", "c", uint64(1<<63))
	f.Fuzz(func(t *testing.T, raw []byte, project, turn, call string, seq uint64) {
		splitTurnRec(raw) // must not panic
		if strings.ContainsRune(project, 0) || project == "" ||
			cardstore.CheckKeyPart("agent_turn_id", turn) != nil || cardstore.CheckKeyPart("tool_call_id", call) != nil {
			return
		}
		check := func(k []byte, kind byte, rest []byte) {
			t.Helper()
			r, ok := splitTurnRec(k)
			if !ok || string(r.project) != project || string(r.turn) != turn || r.kind != kind || !bytes.Equal(r.rest, rest) {
				t.Fatalf("split(%q) = %+v, %v; want %q %q %c %q", k, r, ok, project, turn, kind, rest)
			}
		}
		check(turnKey(turnPrefix(project, turn), seq), kindSeq, binary.BigEndian.AppendUint64(nil, seq))
		check(turnInfoKey(project, turn), kindInfo, nil)
		check(resultKey(project, turn, call), kindCall, append([]byte(call), sep, callResult))
		claimKey := callRecKey(project, turn, call, callClaim)
		check(claimKey, kindCall, append([]byte(call), sep, callClaim))

		k := join(0, project, cardstore.CallKey{AgentTurnID: turn, ToolCallID: call}.String())
		if inRecs, key := claimSlotOf(k); !inRecs || !bytes.Equal(key, claimKey) {
			t.Fatalf("claimSlot(%q) = turnrecs %v, %q; want turnrecs, %q", k, inRecs, key, claimKey)
		}
		other := join(0, project, "service/"+call)
		if inRecs, key := claimSlotOf(other); inRecs || !bytes.Equal(key, other) {
			t.Fatalf("claimSlot(%q) = turnrecs %v, %q; want the claims bucket under itself", other, inRecs, key)
		}
	})
}
