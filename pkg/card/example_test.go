package card_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
)

func ExampleCard_ToolResult() {
	c := &card.Card{
		CardID:     "01890a5d-ac96-774b-bcce-b302099a8057",
		ProjectID:  "demo",
		Type:       card.TypeToolResult,
		ToolCallID: "call-1",
		Metadata:   card.Metadata{AgentTurnID: "turn-1", FunctionName: "echo"},
		Content:    json.RawMessage(`{"status":"success","after_execution":"suspend","result":{"__cg_control":{"after_execution":"terminate"}}}`),
		CreatedAt:  time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	if err := c.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	tr, _ := c.ToolResult()
	fmt.Println(tr.Status, card.EffectiveAfterExecution(tr.Result, tr.AfterExecution))
	// Output: success terminate
}
