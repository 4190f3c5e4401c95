package webui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/confirm"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// The hold catalogue's tools: a tiny catalogue that uses the confirmation
// convention (package confirm) with resolver tools of its own, so the UI
// is shown to render and resolve confirmations without knowing any real
// catalogue (cmd/utpmesh's TestUIBrowser runs it against ATLAS).
const (
	toolHold        = "hold"
	toolHoldConfirm = "hold_confirm"
	toolHoldCancel  = "hold_cancel"
)

// holds is the hold catalogue's state: each parked call by confirmation
// id. Cards is set once the mesh runs.
type holds struct {
	mu      sync.Mutex
	cards   cardstore.Store
	pending map[string]*held
}

type held struct {
	callCard *card.Card
	what     string
	usedBy   string // the resolver call that used it, "" while pending
}

func newHolds() *holds { return &holds{pending: map[string]*held{}} }

// tools are hold (parks its call), hold_confirm and hold_cancel.
func (h *holds) tools() []worker.Tool {
	resolverParams := json.RawMessage(`{"type":"object","required":["confirmation_id"],"additionalProperties":false,"properties":{"confirmation_id":{"type":"string","minLength":1}}}`)
	return []worker.Tool{
		{Name: toolHold, Description: "Parks a hold for a human's confirmation.", Handler: h.hold,
			Parameters: json.RawMessage(`{"type":"object","required":["what"],"properties":{"what":{"type":"string"}}}`)},
		{Name: toolHoldConfirm, Description: "Confirms a hold.", Parameters: resolverParams, Handler: h.resolver(true)},
		{Name: toolHoldCancel, Description: "Cancels a hold.", Parameters: resolverParams, Handler: h.resolver(false)},
	}
}

func (h *holds) hold(_ context.Context, call *worker.Call) (worker.Result, error) {
	var a struct {
		What string `json:"what"`
	}
	if err := call.Bind(&a); err != nil {
		return worker.Result{}, err
	}
	id := "hold_" + call.Command.ToolCallID
	h.mu.Lock()
	h.pending[id] = &held{callCard: call.CallCard, what: a.What}
	h.mu.Unlock()
	would, _ := json.Marshal(map[string]string{"action": "hold " + a.What})
	return worker.OK(confirm.Pending{Status: confirm.StatusPending, ConfirmationID: id, ToolName: toolHold, Would: would,
		ExpiresAt: "2999-01-01T00:00:00Z", ConfirmTool: toolHoldConfirm, CancelTool: toolHoldCancel}), nil
}

// resolver resolves a hold once and records the resolution in the asking
// call's turn.
func (h *holds) resolver(yes bool) worker.HandlerFunc {
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
		p.usedBy = call.Command.ToolCallID
		h.mu.Unlock()
		ans := confirm.Answer{Status: confirm.StatusSkipped, ConfirmationID: a.ConfirmationID, ToolName: toolHold}
		if yes {
			ans.Status, ans.Result = confirm.StatusOK, json.RawMessage(fmt.Sprintf(`{"held":%q}`, p.what))
		}
		now := time.Now().UTC()
		rec, _ := json.Marshal(map[string]any{"transition": confirm.Resolution{ConfirmationID: a.ConfirmationID,
			ToolCallID: p.callCard.ToolCallID, ToolName: toolHold, From: confirm.StatusPending, To: ans.Status,
			ByToolCallID: call.Command.ToolCallID, ByAgentTurnID: call.Command.AgentTurnID, AtUTC: now.Format(time.RFC3339)}})
		md := p.callCard.Metadata
		err := h.cards.Put(ctx, &card.Card{CardID: card.NewID(), ProjectID: p.callCard.ProjectID, Type: "hold.record", AuthorID: "hold",
			Content: rec, ToolCallID: p.callCard.ToolCallID, CreatedAt: now,
			Metadata: card.Metadata{AgentID: md.AgentID, AgentTurnID: md.AgentTurnID, TurnEpoch: md.TurnEpoch, ToolCallID: p.callCard.ToolCallID}})
		if err != nil {
			return worker.Result{}, worker.Fail(card.CodeUpstreamUnavailable, err.Error())
		}
		return worker.OK(ans), nil
	}
}
