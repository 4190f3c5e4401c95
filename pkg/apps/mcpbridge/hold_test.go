package mcpbridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/confirm"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// The hold catalogue: a test-only catalogue whose tool parks its call for a
// human's confirmation in the mesh's convention (package confirm,
// docs/protocol.md §19) and names resolver tools of its own. It shows the
// bridge renders and resolves any catalogue's confirmations; ATLAS's own
// (with the default resolvers ATLAS_CONFIRM/ATLAS_CANCEL) are tested in
// services/atlas.
const (
	toolHold        = "hold"
	toolHoldConfirm = "hold_confirm"
	toolHoldCancel  = "hold_cancel"
)

// holds is the hold catalogue's state: each parked call by confirmation id.
type holds struct {
	mu      sync.Mutex
	pending map[string]*held
}

// held is one parked call.
type held struct {
	what string
	turn string // the turn of the parking call
	// resolvedIn is the turn of the resolver call that used it ("" while
	// pending).
	resolvedIn string
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
	h.pending[id] = &held{what: a.What, turn: call.Command.AgentTurnID}
	h.mu.Unlock()
	would, _ := json.Marshal(map[string]string{"action": "hold " + a.What})
	return worker.OK(confirm.Pending{Status: confirm.StatusPending, ConfirmationID: id, ToolName: toolHold, Would: would,
		ExpiresAt: "2999-01-01T00:00:00Z", ConfirmTool: toolHoldConfirm, CancelTool: toolHoldCancel}), nil
}

// resolver resolves a hold once: confirm answers OK with the held value,
// cancel SKIPPED.
func (h *holds) resolver(yes bool) worker.HandlerFunc {
	return func(_ context.Context, call *worker.Call) (worker.Result, error) {
		var a struct {
			ConfirmationID string `json:"confirmation_id"`
		}
		if err := call.Bind(&a); err != nil {
			return worker.Result{}, err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		p := h.pending[a.ConfirmationID]
		switch {
		case p == nil:
			return worker.Result{}, worker.Fail(card.CodeBadRequest, "unknown hold "+a.ConfirmationID)
		case p.resolvedIn != "":
			return worker.Result{}, worker.Fail(card.CodeBadRequest, fmt.Sprintf("hold %s already resolved", a.ConfirmationID))
		}
		p.resolvedIn = call.Command.AgentTurnID
		ans := confirm.Answer{Status: confirm.StatusSkipped, ConfirmationID: a.ConfirmationID, ToolName: toolHold}
		if yes {
			ans.Status, ans.Result = confirm.StatusOK, json.RawMessage(fmt.Sprintf(`{"held":%q}`, p.what))
		}
		return worker.OK(ans), nil
	}
}

// resolved returns the turns of the parking call and of the resolver call
// of confirmation id ("" while pending).
func (h *holds) resolved(id string) (parkedIn, resolvedIn string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.pending[id]; p != nil {
		return p.turn, p.resolvedIn
	}
	return "", ""
}
