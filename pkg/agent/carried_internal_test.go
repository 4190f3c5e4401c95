package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// TestCarriedResult: a wakeup's result card is taken only when it is the
// tool.result card the wakeup names, of the client's project and the
// call; otherwise Call reads the card (an error here), and a wakeup
// without one carries nothing.
func TestCarriedResult(t *testing.T) {
	c := &Client{project: "p"}
	rc := storetest.ToolResultCard("p", "turn-1", "call-1", card.StatusSuccess)
	data, err := card.Encode(rc)
	if err != nil {
		t.Fatal(err)
	}
	wk := utp.Wakeup{ToolResultCardID: rc.CardID, ResultCard: data}
	got, tr, err := c.carriedResult("turn-1", "call-1", wk)
	if err != nil || got == nil || got.CardID != rc.CardID || tr.Status != card.StatusSuccess {
		t.Fatalf("carried card = %v, %+v, %v; want the result", got, tr, err)
	}
	if got, _, err := c.carriedResult("turn-1", "call-1", utp.Wakeup{ToolResultCardID: rc.CardID}); got != nil || err != nil {
		t.Fatalf("a wakeup without a card = %v, %v; want nothing", got, err)
	}
	call := storetest.ToolCallCard("p", "turn-1", "call-1")
	callData, _ := card.Encode(call)
	for name, tc := range map[string]struct {
		wk         utp.Wakeup
		turn, call string
		project    string
	}{
		"another card id": {utp.Wakeup{ToolResultCardID: card.NewID(), ResultCard: data}, "turn-1", "call-1", "p"},
		"another project": {wk, "turn-1", "call-1", "q"},
		"another call":    {wk, "turn-1", "call-2", "p"},
		"another turn":    {wk, "turn-2", "call-1", "p"},
		"not a result":    {utp.Wakeup{ToolResultCardID: call.CardID, ResultCard: callData}, "turn-1", "call-1", "p"},
		"not a card":      {utp.Wakeup{ToolResultCardID: rc.CardID, ResultCard: json.RawMessage(`{"x":1}`)}, "turn-1", "call-1", "p"},
		"not even JSON":   {utp.Wakeup{ToolResultCardID: rc.CardID, ResultCard: json.RawMessage(`{`)}, "turn-1", "call-1", "p"},
	} {
		c := &Client{project: tc.project}
		if got, _, err := c.carriedResult(tc.turn, tc.call, tc.wk); got != nil || err == nil {
			t.Errorf("%s: carried card = %v, %v; want an error (Call reads the card instead)", name, got, err)
		} else if strings.TrimSpace(err.Error()) == "" {
			t.Errorf("%s: empty error", name)
		}
	}
}
