// Package confirmtest is a fixture of the confirmation convention (package
// confirm, docs/protocol.md §19) for tests: the hold catalogue, a tiny
// test-only catalogue whose tool parks its call with a confirm.Pending and
// names resolver tools of its own. Clients that render confirmations (the
// MCP bridge, the web UI) use it to show they render and resolve any
// catalogue's confirmations without knowing a real one; ATLAS's own, with
// the default resolvers, are tested in services/atlas. It is used only by
// tests and imports no catalogue.
package confirmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/confirm"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// The hold catalogue's tools.
const (
	// Tool parks its call: {"what": "…"} answers a Pending of that hold.
	Tool = "hold"
	// ConfirmTool resolves a hold: OK with {"held": what}.
	ConfirmTool = "hold_confirm"
	// CancelTool resolves a hold: SKIPPED.
	CancelTool = "hold_cancel"
)

// RecordType is the card type of a resolution's record (see Holds.Record).
const RecordType = "hold.record"

// CardWriter writes cards: the part of a card store (cardstore.Store) that
// Holds uses to record resolutions.
type CardWriter interface {
	Put(ctx context.Context, cards ...*card.Card) error
}

// Holds is the hold catalogue's state: each parked call by confirmation
// id. Its zero value is not usable: call New.
type Holds struct {
	mu      sync.Mutex
	pending map[string]*held
	cards   CardWriter
}

// held is one parked call.
type held struct {
	callCard *card.Card
	what     string
	turn     string // the turn of the parking call
	// usedBy and resolvedIn are the resolver call that used it and its
	// turn ("" while pending).
	usedBy, resolvedIn string
}

// New is a hold catalogue with nothing parked.
func New() *Holds { return &Holds{pending: map[string]*held{}} }

// Record makes each resolution write a RecordType card into the asking
// call's turn, its content a confirm.Resolution under "transition" (the
// convention's optional record). Call it before any call is resolved,
// e.g. once the mesh runs (mesh.Cards()).
func (h *Holds) Record(cards CardWriter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cards = cards
}

// Tools are Tool (parks its call), ConfirmTool and CancelTool.
func (h *Holds) Tools() []worker.Tool {
	resolverParams := json.RawMessage(`{"type":"object","required":["confirmation_id"],"additionalProperties":false,"properties":{"confirmation_id":{"type":"string","minLength":1}}}`)
	return []worker.Tool{
		{Name: Tool, Description: "Parks a hold for a human's confirmation.", Handler: h.hold,
			Parameters: json.RawMessage(`{"type":"object","required":["what"],"properties":{"what":{"type":"string"}}}`)},
		{Name: ConfirmTool, Description: "Confirms a hold.", Parameters: resolverParams, Handler: h.resolver(true)},
		{Name: CancelTool, Description: "Cancels a hold.", Parameters: resolverParams, Handler: h.resolver(false)},
	}
}

// hold parks the call as "hold_<tool_call_id>".
func (h *Holds) hold(_ context.Context, call *worker.Call) (worker.Result, error) {
	var a struct {
		What string `json:"what"`
	}
	if err := call.Bind(&a); err != nil {
		return worker.Result{}, err
	}
	id := "hold_" + call.Command.ToolCallID
	h.mu.Lock()
	h.pending[id] = &held{callCard: call.CallCard, what: a.What, turn: call.Command.AgentTurnID}
	h.mu.Unlock()
	would, _ := json.Marshal(map[string]string{"action": "hold " + a.What})
	return worker.OK(confirm.Pending{Status: confirm.StatusPending, ConfirmationID: id, ToolName: Tool, Would: would,
		ExpiresAt: "2999-01-01T00:00:00Z", ConfirmTool: ConfirmTool, CancelTool: CancelTool}), nil
}

// resolver resolves a hold once: confirm answers OK with the held value,
// cancel SKIPPED; with Record set it records the resolution in the asking
// call's turn.
func (h *Holds) resolver(yes bool) worker.HandlerFunc {
	return func(ctx context.Context, call *worker.Call) (worker.Result, error) {
		var a struct {
			ConfirmationID string `json:"confirmation_id"`
		}
		if err := call.Bind(&a); err != nil {
			return worker.Result{}, err
		}
		h.mu.Lock()
		p := h.pending[a.ConfirmationID]
		switch {
		case p == nil:
			h.mu.Unlock()
			return worker.Result{}, worker.Fail(card.CodeBadRequest, "unknown hold "+a.ConfirmationID)
		case p.usedBy != "":
			h.mu.Unlock()
			return worker.Result{}, worker.Fail(card.CodeBadRequest, fmt.Sprintf("hold %s already used by call %s", a.ConfirmationID, p.usedBy))
		}
		p.usedBy, p.resolvedIn = call.Command.ToolCallID, call.Command.AgentTurnID
		cards := h.cards
		h.mu.Unlock()
		ans := confirm.Answer{Status: confirm.StatusSkipped, ConfirmationID: a.ConfirmationID, ToolName: Tool}
		if yes {
			ans.Status, ans.Result = confirm.StatusOK, json.RawMessage(fmt.Sprintf(`{"held":%q}`, p.what))
		}
		if cards == nil {
			return worker.OK(ans), nil
		}
		now := time.Now().UTC()
		rec, _ := json.Marshal(map[string]any{"transition": confirm.Resolution{ConfirmationID: a.ConfirmationID,
			ToolCallID: p.callCard.ToolCallID, ToolName: Tool, From: confirm.StatusPending, To: ans.Status,
			ByToolCallID: call.Command.ToolCallID, ByAgentTurnID: call.Command.AgentTurnID, AtUTC: now.Format(time.RFC3339)}})
		md := p.callCard.Metadata
		err := cards.Put(ctx, &card.Card{CardID: card.NewID(), ProjectID: p.callCard.ProjectID, Type: RecordType, AuthorID: Tool,
			Content: rec, ToolCallID: p.callCard.ToolCallID, CreatedAt: now,
			Metadata: card.Metadata{AgentID: md.AgentID, AgentTurnID: md.AgentTurnID, TurnEpoch: md.TurnEpoch, ToolCallID: p.callCard.ToolCallID}})
		if err != nil {
			return worker.Result{}, worker.Fail(card.CodeUpstreamUnavailable, err.Error())
		}
		return worker.OK(ans), nil
	}
}

// Resolved returns the turns of the parking call and of the resolver call
// of confirmation id ("" while pending; both "" for an unknown id).
func (h *Holds) Resolved(id string) (parkedIn, resolvedIn string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.pending[id]; p != nil {
		return p.turn, p.resolvedIn
	}
	return "", ""
}
