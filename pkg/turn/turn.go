package turn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// Errors of this package. The message around a sentinel names the turn,
// the field or the call; test with errors.Is.
var (
	// ErrInvalid: an argument breaks a rule (an empty turn id, a project
	// that is not a subject token, a nil store or client, a bad option).
	ErrInvalid = errors.New("turn: invalid argument")
	// ErrNotFound: the project has no card of the turn.
	ErrNotFound = errors.New("turn: not found")
	// ErrNotReplayable: the turn has no tool call that can be re-executed
	// (every call lacks its tool.call card, so its arguments are unknown).
	ErrNotReplayable = errors.New("turn: nothing to replay")
)

// StatusPending is the Status of a call that has no tool.result card yet.
// It is not a UTP status: the call is queued, running, or was never
// dispatched.
const StatusPending = "pending"

// StatusUnreadable is the Status of a call whose tool.result card content
// cannot be decoded (Problems says why).
const StatusUnreadable = "unreadable"

// Turn is one agent turn reconstructed from its cards.
type Turn struct {
	// ProjectID and AgentTurnID identify the turn.
	ProjectID   string `json:"project_id"`
	AgentTurnID string `json:"agent_turn_id"`
	// AgentID is the metadata.agent_id of the turn's first card that has
	// one ("" if none has).
	AgentID string `json:"agent_id,omitempty"`
	// Epochs are the distinct metadata.turn_epoch values of the turn's
	// cards, ascending.
	Epochs []int64 `json:"epochs"`
	// Cards is the number of cards the turn has.
	Cards int `json:"cards"`
	// FirstAt and LastAt are the earliest and latest created_at among the
	// turn's cards.
	FirstAt time.Time `json:"first_at"`
	LastAt  time.Time `json:"last_at"`
	// Calls are the turn's tool calls in the write order of their first
	// card (the tool.call card, or the tool.result card of a call whose
	// tool.call card is missing).
	Calls []Call `json:"calls"`
	// Others are the turn's cards that are neither tool.call nor
	// tool.result (thoughts, instructions, deliverables…), in write order.
	Others []Other `json:"other_cards"`
	// Problems lists what does not add up: results without a call card,
	// unreadable contents, repeated cards. Empty for a healthy turn.
	Problems []string `json:"problems,omitempty"`
	// Counts are the calls by Status (success, failed, …, pending).
	Counts map[string]int `json:"counts"`
}

// Call is one tool call of a turn and its outcome.
type Call struct {
	// Seq is the position (1-based) of the call's first card among all the
	// turn's cards, in write order.
	Seq int `json:"seq"`
	// ToolCallID identifies the call within the turn.
	ToolCallID string `json:"tool_call_id"`
	// ToolName is the called tool (from the tool.call content, else the
	// result's metadata.function_name).
	ToolName string `json:"tool_name"`
	// StepID and ParentStepID are the reasoning step of the call.
	StepID       string `json:"step_id,omitempty"`
	ParentStepID string `json:"parent_step_id,omitempty"`
	// TurnEpoch is the epoch of the tool.call card; ResultEpoch that of the
	// tool.result card (0 while pending).
	TurnEpoch   int64 `json:"turn_epoch"`
	ResultEpoch int64 `json:"result_epoch,omitempty"`
	// Arguments and TargetSubject come from the tool.call content.
	Arguments     json.RawMessage `json:"arguments,omitempty"`
	TargetSubject string          `json:"target_subject,omitempty"`
	// HasMandate reports that the call carried a mandate: the card holds
	// metadata.mandate (a raw command; the token is in Mandate, which JSON
	// output leaves out) or metadata.mandate_sha256 (an admitted call,
	// whose token no card keeps: Mandate is "").
	HasMandate bool   `json:"has_mandate,omitempty"`
	Mandate    string `json:"-"`
	// MandateSHA256 is an admitted call's mandate hash (the token is in
	// no card).
	MandateSHA256 string `json:"mandate_sha256,omitempty"`
	// CallCardID and ResultCardID are the card ids ("" when missing).
	CallCardID   string `json:"call_card_id,omitempty"`
	ResultCardID string `json:"result_card_id,omitempty"`
	// CalledAt is the tool.call card's created_at; FinishedAt the
	// tool.result card's.
	CalledAt   time.Time `json:"called_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Duration is FinishedAt − CalledAt (0 when either is missing).
	Duration time.Duration `json:"duration_ns,omitempty"`
	// Status is the result's status, or StatusPending.
	Status string `json:"status"`
	// AfterExecution is the effective after_execution of the result: its
	// __cg_control override when valid, else the value the card records.
	// RecordedAfterExecution is the value the card records.
	AfterExecution         card.AfterExecution `json:"after_execution,omitempty"`
	RecordedAfterExecution card.AfterExecution `json:"recorded_after_execution,omitempty"`
	// Result is the tool's output; Error the structured error of a call
	// that did not succeed.
	Result json.RawMessage `json:"result,omitempty"`
	Error  *card.Error     `json:"error,omitempty"`
	// Worker is the result card's author_id (the worker instance).
	Worker string `json:"worker,omitempty"`
	// Dispatches counts the call's tool.call cards (more than one when the
	// runtime re-dispatched the call; the first card stands).
	Dispatches int `json:"dispatches"`
	// CallCard and ResultCard are the cards themselves (nil when missing).
	CallCard   *card.Card `json:"-"`
	ResultCard *card.Card `json:"-"`
}

// Finished reports whether the call has a tool.result card.
func (c *Call) Finished() bool { return c.ResultCard != nil }

// Other is a card of the turn that is not part of a tool call.
type Other struct {
	// Seq is the card's position (1-based) among the turn's cards.
	Seq int `json:"seq"`
	// Card is the card.
	Card *card.Card `json:"card"`
}

// Load reads every card of the project's turn from store, in write order,
// and reconstructs the turn: it pairs each tool.call card with the
// tool.result card of the same tool_call_id and keeps the other cards in
// order. A turn with no card is ErrNotFound.
func Load(ctx context.Context, store cardstore.Store, project, agentTurnID string) (*Turn, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: turn.Load: nil store", ErrInvalid)
	}
	if err := checkArgs(project, agentTurnID); err != nil {
		return nil, err
	}
	cards, err := cardstore.AllTurn(ctx, store, project, agentTurnID)
	if err != nil {
		return nil, fmt.Errorf("turn: read the cards of turn %s in project %s: %w", agentTurnID, project, err)
	}
	if len(cards) == 0 {
		return nil, fmt.Errorf("%w: project %s has no card of turn %q", ErrNotFound, project, agentTurnID)
	}
	return FromCards(project, agentTurnID, cards), nil
}

// checkArgs validates the project and turn id arguments.
func checkArgs(project, agentTurnID string) error {
	if err := card.ValidateName("project_id", project); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if agentTurnID == "" {
		return fmt.Errorf("%w: agent_turn_id is required", ErrInvalid)
	}
	if len(agentTurnID) > card.MaxIDLen {
		return fmt.Errorf("%w: agent_turn_id is longer than %d bytes", ErrInvalid, card.MaxIDLen)
	}
	return nil
}

// FromCards reconstructs a turn from its cards, given in write order (as
// cardstore.AllTurn returns them). Cards of other turns are ignored and
// noted in Problems. It never fails: what does not add up is reported in
// Problems.
func FromCards(project, agentTurnID string, cards []*card.Card) *Turn {
	// Size Calls and the index once: a Call is a few hundred bytes, and
	// growing a slice of 10,000 of them by appending copies it ~20 times.
	ncalls := 0
	for _, c := range cards {
		if c != nil && c.Type == card.TypeToolCall {
			ncalls++
		}
	}
	t := &Turn{ProjectID: project, AgentTurnID: agentTurnID, Calls: make([]Call, 0, ncalls), Others: []Other{}, Epochs: []int64{}, Counts: map[string]int{}}
	idx := make(map[string]int, ncalls) // tool_call_id → index in t.Calls
	epochs := make(map[int64]bool)
	for i, c := range cards {
		seq := i + 1
		if c == nil {
			t.problem("card #%d is null", seq)
			continue
		}
		if c.Metadata.AgentTurnID != agentTurnID {
			t.problem("card %s (#%d) belongs to turn %q; ignored", c.CardID, seq, c.Metadata.AgentTurnID)
			continue
		}
		t.Cards++
		if t.AgentID == "" {
			t.AgentID = c.Metadata.AgentID
		}
		if !epochs[c.Metadata.TurnEpoch] {
			epochs[c.Metadata.TurnEpoch] = true
			t.Epochs = append(t.Epochs, c.Metadata.TurnEpoch)
		}
		if t.FirstAt.IsZero() || c.CreatedAt.Before(t.FirstAt) {
			t.FirstAt = c.CreatedAt
		}
		if c.CreatedAt.After(t.LastAt) {
			t.LastAt = c.CreatedAt
		}
		switch c.Type {
		case card.TypeToolCall, card.TypeToolResult:
			j, ok := idx[c.ToolCallID]
			if !ok {
				j = len(t.Calls)
				idx[c.ToolCallID] = j
				t.Calls = append(t.Calls, Call{Seq: seq, ToolCallID: c.ToolCallID})
			}
			if c.Type == card.TypeToolCall {
				t.addCall(&t.Calls[j], c)
			} else {
				t.addResult(&t.Calls[j], c)
			}
		default:
			t.Others = append(t.Others, Other{Seq: seq, Card: c})
		}
	}
	slices.Sort(t.Epochs)
	for i := range t.Calls {
		c := &t.Calls[i]
		if c.CallCard == nil {
			t.problem("tool_call_id %s has a tool.result card but no tool.call card", c.ToolCallID)
		}
		if c.ResultCard == nil {
			c.Status = StatusPending
		}
		if !c.CalledAt.IsZero() && !c.FinishedAt.IsZero() {
			c.Duration = c.FinishedAt.Sub(c.CalledAt)
		}
		t.Counts[c.Status]++
	}
	return t
}

func (t *Turn) problem(format string, a ...any) {
	t.Problems = append(t.Problems, fmt.Sprintf(format, a...))
}

func (t *Turn) addCall(c *Call, cd *card.Card) {
	c.Dispatches++
	if c.CallCard != nil {
		return // a re-dispatch: the first card stands
	}
	c.CallCard, c.CallCardID, c.CalledAt = cd, cd.CardID, cd.CreatedAt
	c.StepID, c.ParentStepID, c.TurnEpoch = cd.Metadata.StepID, cd.Metadata.ParentStepID, cd.Metadata.TurnEpoch
	if raw, ok := cd.Metadata.Extra[metadataMandateSHA256]; ok {
		// An admitted call: the mesh verified a mandate and kept only its
		// hash (docs/protocol.md §5.7); a replay needs the token again
		// (ReplayOptions.Mandate, or Known).
		c.HasMandate = true
		_ = json.Unmarshal(raw, &c.MandateSHA256)
	}
	if raw, ok := cd.Metadata.Extra[agent.MetadataMandate]; ok {
		var m string
		if json.Unmarshal(raw, &m) == nil && m != "" {
			c.Mandate, c.HasMandate = m, true
		} else {
			t.problem("tool.call card %s: metadata.%s is not a non-empty JSON string", cd.CardID, agent.MetadataMandate)
		}
	}
	tc, err := cd.ToolCall()
	if err != nil {
		t.problem("tool.call card %s: %v", cd.CardID, err)
		return
	}
	c.ToolName, c.Arguments, c.TargetSubject = tc.ToolName, tc.Arguments, tc.TargetSubject
}

func (t *Turn) addResult(c *Call, cd *card.Card) {
	if c.ResultCard != nil {
		t.problem("tool_call_id %s has a second tool.result card %s; the first (%s) stands", c.ToolCallID, cd.CardID, c.ResultCardID)
		return
	}
	c.ResultCard, c.ResultCardID, c.FinishedAt = cd, cd.CardID, cd.CreatedAt
	c.ResultEpoch, c.Worker = cd.Metadata.TurnEpoch, cd.AuthorID
	if c.ToolName == "" {
		c.ToolName = cd.Metadata.FunctionName
	}
	if c.StepID == "" {
		c.StepID = cd.Metadata.StepID
	}
	tr, err := cd.ToolResult()
	if err != nil {
		t.problem("tool.result card %s: %v", cd.CardID, err)
		c.Status = StatusUnreadable
		return
	}
	c.Status = string(tr.Status)
	c.RecordedAfterExecution = tr.AfterExecution
	c.AfterExecution = tr.AfterExecution
	// Decode the result a third time only when it may hold __cg_control
	// (spelled out, or hidden behind a \u escape).
	if bytes.Contains(tr.Result, []byte("cg_control")) || bytes.Contains(tr.Result, []byte(`\u`)) {
		c.AfterExecution = card.EffectiveAfterExecution(tr.Result, tr.AfterExecution)
	}
	c.Result, c.Error = tr.Result, tr.Error
}

// metadataMandateSHA256 is the tool.call metadata key of an admitted
// call's mandate hash (pkg/admit).
const metadataMandateSHA256 = "mandate_sha256"
