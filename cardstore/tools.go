package cardstore

import (
	"errors"
	"fmt"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/subjects"
)

// The rules of the tool-scoped writes (a worker's claim, release, result
// and start of a call on its tool's subject; see natsstore's ToolStore and
// docs/security.md), in one place for every store that serves them. tool
// is a tool token (subjects.ToolToken of a tool name).

// CheckResultTool fails with ErrForbidden unless the tool.result card c
// names tool in metadata.function_name: a tool's workers write results of
// that tool only. Cards of other types pass.
func CheckResultTool(c *card.Card, tool string) error {
	if c == nil || c.Type != card.TypeToolResult {
		return nil
	}
	if c.Metadata.FunctionName == "" || subjects.ToolToken(c.Metadata.FunctionName) != tool {
		return fmt.Errorf("%w: tool.result card %s names tool %q in metadata.function_name; this subject writes results of tool %q only",
			ErrForbidden, c.CardID, c.Metadata.FunctionName, tool)
	}
	return nil
}

// CheckCallCardTool applies the rule that a call's tool.call card, when it
// exists, calls tool, to what a store's lookup of the card returned (c,
// err): no card (ErrNotFound) passes, a lookup error is returned as it
// is, an unreadable card is ErrInvalid and a card of another tool is
// ErrForbidden.
func CheckCallCardTool(c *card.Card, err error, projectID, turn, call, tool string) error {
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	tc, err := c.ToolCall()
	if err != nil {
		return fmt.Errorf("%w: tool.call card %s: %v", ErrInvalid, c.CardID, err)
	}
	if subjects.ToolToken(tc.ToolName) != tool {
		return fmt.Errorf("%w: the call %q of turn %q in project %s calls tool %q (card %s), not %q",
			ErrForbidden, call, turn, projectID, tc.ToolName, c.CardID, tool)
	}
	return nil
}

// CheckKeyCallsTool applies CheckCallCardTool to the call key names
// (ParseCallKey), looking its tool.call card up with find. A key that
// names no call passes.
func CheckKeyCallsTool(key, projectID, tool string, find func(turn, call string) (*card.Card, error)) error {
	k, ok := ParseCallKey(key)
	if !ok {
		return nil
	}
	c, err := find(k.AgentTurnID, k.ToolCallID)
	return CheckCallCardTool(c, err, projectID, k.AgentTurnID, k.ToolCallID, tool)
}
