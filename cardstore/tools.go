package cardstore

import (
	"errors"
	"fmt"
	"strings"

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

// CheckKeyCallsTool applies CheckCallCardTool to every call key could be
// the ToolCallKey of, looking each call's tool.call card up with find: ids
// may hold '/', so a key has one reading per '/' after "toolcall/" (the
// readings whose agent_turn_id is not a valid id are skipped). A key that
// is not a tool call's passes.
func CheckKeyCallsTool(key, projectID, tool string, find func(turn, call string) (*card.Card, error)) error {
	rest, ok := strings.CutPrefix(key, "toolcall/")
	if !ok {
		return nil
	}
	for i := strings.IndexByte(rest, '/'); i > 0 && i < len(rest)-1; {
		if turn, call := rest[:i], rest[i+1:]; CheckKeyPart("agent_turn_id", turn) == nil {
			c, err := find(turn, call)
			if err := CheckCallCardTool(c, err, projectID, turn, call, tool); err != nil {
				return err
			}
		}
		j := strings.IndexByte(rest[i+1:], '/')
		if j < 0 {
			break
		}
		i += j + 1
	}
	return nil
}
