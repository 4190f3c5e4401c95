package receipts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/confirm"
	"github.com/utpmesh/utpmesh/services/atlas/internal/determ"
)

// CardType is the type of receipt cards.
const CardType = "atlas.receipt"

// The ATLAS statuses of a tool call (the seed's tool status lifecycle):
// those of the mesh's confirmation convention (package confirm).
const (
	StatusOK             = confirm.StatusOK
	StatusPendingConfirm = confirm.StatusPending
	StatusSkipped        = confirm.StatusSkipped
	StatusFailed         = confirm.StatusFailed
)

// The kinds of Record.
const (
	KindCall       = "call"
	KindTransition = "transition"
)

// Errors of this package.
var (
	// ErrInvalid: the request names no project or turn, or a record is
	// malformed.
	ErrInvalid = errors.New("receipts: invalid request")
)

// ToolCall is one entry of a receipt's tool_calls, as the seed shows it.
type ToolCall struct {
	ToolName string          `json:"tool_name"`
	Args     json.RawMessage `json:"args"`
	// Status is OK, PENDING_CONFIRM, SKIPPED or FAILED.
	Status string `json:"status"`
	// Result is the tool's result; null while PENDING_CONFIRM and after
	// SKIPPED or FAILED.
	Result       json.RawMessage `json:"result"`
	TimestampUTC string          `json:"timestamp_utc"`
	// ToolCallID and AgentTurnID identify the call.
	ToolCallID  string `json:"tool_call_id"`
	AgentTurnID string `json:"agent_turn_id,omitempty"`
	// ConfirmationID is set on a call that waited for confirmation.
	ConfirmationID string `json:"confirmation_id,omitempty"`
}

// Change is one object a call created, updated or deleted.
type Change struct {
	// Op is create, update or delete.
	Op string `json:"op"`
	// Kind is the object type: task, note, block, workflow, event,
	// notification, run.
	Kind string `json:"kind"`
	// ID is the object's id.
	ID string `json:"id"`
	// Before and After are the changed fields (update), the deleted object
	// (delete: before) or the created one (create: after).
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
}

// Undo is an undo step: a normal ATLAS tool call that reverses a change.
type Undo struct {
	ToolName string          `json:"tool_name"`
	Args     json.RawMessage `json:"args"`
}

// Error is an error a call ended with.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// PendingResult is the tool.result content.result of an ATLAS call that
// waits for confirmation: the mesh's convention (confirm.Pending) with no
// resolver tools named, so ATLAS_CONFIRM / ATLAS_CANCEL (the convention's
// defaults) resolve it. docs/protocol.md §16.3, §19.
type PendingResult = confirm.Pending

// Transition records a pending call being resolved: the convention's
// resolution record (confirm.Resolution), carried under "transition" in a
// Record of Kind KindTransition.
type Transition = confirm.Resolution

// Record is the content of one receipt card.
type Record struct {
	// Kind is "call" (the call itself) or "transition" (a pending call
	// resolved by a later confirm or cancel).
	Kind     string   `json:"kind"`
	ToolCall ToolCall `json:"tool_call"`
	Changes  []Change `json:"changes"`
	// Undo is the call's undo step, or null.
	Undo     *Undo    `json:"undo"`
	Warnings []string `json:"warnings"`
	Errors   []Error  `json:"errors"`
	// Transition is set on Kind "transition".
	Transition *Transition `json:"transition,omitempty"`
}

// Card builds the receipt card of rec for the call whose tool.call card is
// callCard. author names the writing service (e.g. "atlas.tasks").
func Card(callCard *card.Card, author string, rec Record, at time.Time) (*card.Card, error) {
	if rec.Changes == nil {
		rec.Changes = []Change{}
	}
	if rec.Warnings == nil {
		rec.Warnings = []string{}
	}
	if rec.Errors == nil {
		rec.Errors = []Error{}
	}
	if len(rec.ToolCall.Args) == 0 {
		rec.ToolCall.Args = json.RawMessage("{}")
	}
	content, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	md := card.Metadata{
		AgentID: callCard.Metadata.AgentID, AgentTurnID: callCard.Metadata.AgentTurnID,
		TurnEpoch: callCard.Metadata.TurnEpoch, StepID: callCard.Metadata.StepID,
		ToolCallID: callCard.ToolCallID, TraceID: callCard.Metadata.TraceID,
	}
	return &card.Card{
		CardID:     cardID(callCard.ProjectID, md.AgentTurnID, callCard.ToolCallID, rec.Kind),
		ProjectID:  callCard.ProjectID,
		Type:       CardType,
		AuthorID:   author,
		Content:    content,
		Metadata:   md,
		ToolCallID: callCard.ToolCallID,
		CreatedAt:  at.UTC(),
	}, nil
}

// Write stores the receipt card of rec. A second write of the same record
// is a no-op; a different record for the same call and kind fails with
// cardstore.ErrConflict.
func Write(ctx context.Context, st cardstore.Store, callCard *card.Card, author string, rec Record, at time.Time) error {
	c, err := Card(callCard, author, rec, at)
	if err != nil {
		return err
	}
	if err := st.Put(ctx, c); err != nil {
		return fmt.Errorf("receipts: write receipt of %s: %w", callCard.ToolCallID, err)
	}
	return nil
}

// UndoStep is one undo step of a receipt, with the call it undoes.
type UndoStep struct {
	ToolCallID string          `json:"tool_call_id"`
	ToolName   string          `json:"tool_name"`
	Args       json.RawMessage `json:"args"`
}

// TurnError is one error of a receipt, with its call.
type TurnError struct {
	ToolCallID string `json:"tool_call_id"`
	ToolName   string `json:"tool_name"`
	Code       string `json:"code"`
	Message    string `json:"message"`
}

// Receipt is a turn's receipt.
type Receipt struct {
	ProjectID   string       `json:"project_id"`
	AgentTurnID string       `json:"agent_turn_id"`
	ToolCalls   []ToolCall   `json:"tool_calls"`
	Changes     []Change     `json:"changes"`
	UndoSteps   []UndoStep   `json:"undo_steps"`
	Warnings    []string     `json:"warnings"`
	Errors      []TurnError  `json:"errors"`
	Transitions []Transition `json:"transitions"`
}

// Assemble reads the receipt of one turn. A turn with no ATLAS call has an
// empty receipt (not an error).
func Assemble(ctx context.Context, st cardstore.Store, projectID, agentTurnID string) (*Receipt, error) {
	if projectID == "" || agentTurnID == "" {
		return nil, fmt.Errorf("%w: project and agent_turn_id are required", ErrInvalid)
	}
	cards, err := cardstore.AllTurn(ctx, st, projectID, agentTurnID)
	if err != nil {
		return nil, fmt.Errorf("receipts: read turn %s: %w", agentTurnID, err)
	}
	return Fold(projectID, agentTurnID, cards), nil
}

// Fold builds a receipt from a turn's cards, in write order.
func Fold(projectID, agentTurnID string, cards []*card.Card) *Receipt {
	r := &Receipt{ProjectID: projectID, AgentTurnID: agentTurnID, ToolCalls: []ToolCall{}, Changes: []Change{},
		UndoSteps: []UndoStep{}, Warnings: []string{}, Errors: []TurnError{}, Transitions: []Transition{}}
	index := map[string]int{} // tool_call_id → position in ToolCalls
	atlasCalls := map[string]*card.Card{}
	for _, c := range cards {
		switch c.Type {
		case card.TypeToolCall:
			if tc, err := c.ToolCall(); err == nil && strings.Contains(tc.TargetSubject, ".cmd.tool.atlas.") {
				atlasCalls[c.ToolCallID] = c
			}
		case card.TypeToolResult:
			r.foldRefused(c, atlasCalls, index)
		case CardType:
			var rec Record
			if err := json.Unmarshal(c.Content, &rec); err != nil {
				r.Warnings = append(r.Warnings, fmt.Sprintf("receipt card %s is unreadable: %v", c.CardID, err))
				continue
			}
			r.fold(rec, index)
		}
	}
	return r
}

func (r *Receipt) fold(rec Record, index map[string]int) {
	tc := rec.ToolCall
	switch rec.Kind {
	case KindTransition:
		if rec.Transition == nil {
			return
		}
		r.Transitions = append(r.Transitions, *rec.Transition)
		if i, ok := index[rec.Transition.ToolCallID]; ok {
			r.ToolCalls[i].Status = rec.Transition.To
			r.ToolCalls[i].Result = tc.Result
		}
	default:
		if _, dup := index[tc.ToolCallID]; dup {
			return
		}
		index[tc.ToolCallID] = len(r.ToolCalls)
		r.ToolCalls = append(r.ToolCalls, tc)
	}
	r.Changes = append(r.Changes, rec.Changes...)
	if rec.Undo != nil {
		r.UndoSteps = append(r.UndoSteps, UndoStep{ToolCallID: tc.ToolCallID, ToolName: rec.Undo.ToolName, Args: rec.Undo.Args})
	}
	r.Warnings = append(r.Warnings, rec.Warnings...)
	for _, e := range rec.Errors {
		r.Errors = append(r.Errors, TurnError{ToolCallID: tc.ToolCallID, ToolName: tc.ToolName, Code: e.Code, Message: e.Message})
	}
}

// foldRefused lists an ATLAS call that failed before its handler ran (no
// receipt card precedes its result).
func (r *Receipt) foldRefused(c *card.Card, atlasCalls map[string]*card.Card, index map[string]int) {
	callCard, ok := atlasCalls[c.ToolCallID]
	if !ok {
		return
	}
	if _, seen := index[c.ToolCallID]; seen {
		return
	}
	res, err := c.ToolResult()
	if err != nil || res.Status == card.StatusSuccess || res.Status == card.StatusPartial {
		return
	}
	tc, _ := callCard.ToolCall()
	e := TurnError{ToolCallID: c.ToolCallID, ToolName: tc.ToolName, Code: string(res.Status)}
	if res.Error != nil {
		e.Code, e.Message = string(res.Error.Code), res.Error.Message
	}
	index[c.ToolCallID] = len(r.ToolCalls)
	r.ToolCalls = append(r.ToolCalls, ToolCall{ToolName: tc.ToolName, Args: tc.Arguments, Status: StatusFailed,
		Result: json.RawMessage("null"), TimestampUTC: callCard.CreatedAt.UTC().Truncate(time.Second).Format(time.RFC3339),
		ToolCallID: c.ToolCallID, AgentTurnID: callCard.Metadata.AgentTurnID})
	r.Errors = append(r.Errors, e)
}

func cardID(project, turn, toolCallID, kind string) string {
	return determ.CardID("atlas.receipt", project, turn, toolCallID, kind)
}
