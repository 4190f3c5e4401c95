package utp

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// CallRef names one tool call: (project_id, agent_turn_id, tool_call_id).
// Every key or id built from a call goes through it, because the ids are
// free-form: joining them with a separator is ambiguous (turn "t-1" with
// call "2" and turn "t" with call "1-2" both give "t-1-2").
type CallRef struct {
	ProjectID   string
	AgentTurnID string
	ToolCallID  string
}

// Ref is the CallRef of project's call (agentTurnID, toolCallID).
func Ref(project, agentTurnID, toolCallID string) CallRef {
	return CallRef{ProjectID: project, AgentTurnID: agentTurnID, ToolCallID: toolCallID}
}

// Key is an unambiguous in-process map key of the call: each id written as
// its decimal byte length, ':' and the id, so different calls never share
// a key whatever bytes their ids hold.
func (c CallRef) Key() string {
	var b strings.Builder
	b.Grow(len(c.ProjectID) + len(c.AgentTurnID) + len(c.ToolCallID) + 12)
	for _, s := range []string{c.ProjectID, c.AgentTurnID, c.ToolCallID} {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	return b.String()
}

// MsgID is the Nats-Msg-Id of the call's tool command: "cmd-" and the hex
// SHA-256 of the length-prefixed tuple (each id as its length, a 64-bit
// big-endian integer, then its bytes). JetStream drops a re-publish of the
// same call within the stream's duplicate window and never a different
// call's command. It is 68 bytes whatever the ids' length.
func (c CallRef) MsgID() string {
	h := sha256.New()
	var n [8]byte
	for _, s := range []string{c.ProjectID, c.AgentTurnID, c.ToolCallID} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return "cmd-" + hex.EncodeToString(h.Sum(nil))
}

// callCardNamespace makes a call's tool.call card id from its CallRef.
var callCardNamespace = uuid.MustParse("6b1f8e0c-8d0e-4c77-9d1a-2f3c4b5a6e70")

// CallCardID is the id the mesh's admission gives the call's tool.call
// card: uuidv5(6b1f8e0c-8d0e-4c77-9d1a-2f3c4b5a6e70, MsgID()), so a retry
// of the same call writes the same card. (A raw-mode runtime names its
// cards itself.)
func (c CallRef) CallCardID() string {
	return uuid.NewSHA1(callCardNamespace, []byte(c.MsgID())).String()
}
