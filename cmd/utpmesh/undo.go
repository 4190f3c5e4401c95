package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
)

func init() {
	register(spec{name: "undo", order: 63, summary: "run the undo step a call's result carries (undo CALL_ID --turn T)",
		make: func(e env) command { return &undoCommand{env: e} }})
}

// undoCommand runs the undo step of a finished call as a normal tool call.
//
// The undo call is made in the turn of the call whose result carries the
// undo step, with tool_call_id "undo-<that call's tool_call_id>". So a
// second undo of the same call is detected (that id already has a result)
// instead of undoing twice, and the turn's receipt shows the undo next to
// the call it reverses. For a PENDING_CONFIRM call that was confirmed, the
// undo step is carried by the ATLAS_CONFIRM call that ran it (the turn's
// receipt names it), so undoing either one runs the same single undo.
type undoCommand struct{ env env }

// undoPrefix starts the tool_call_id of an undo call.
const undoPrefix = "undo-"

// errUndo marks undo refusals: the call exists but there is nothing (more)
// to undo. They are failures (exit 1), not usage mistakes.
var errUndo = errors.New("nothing to undo")

func (c *undoCommand) Run(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("undo", "utpmesh undo CALL_ID --turn T [--project P] [--channel C] [--json] [--mandate FILE]", c.env)
	turn := fs.String("turn", "", "agent_turn_id of the call to undo (required; 'utpmesh call' and 'utpmesh confirm' print the exact undo command)")
	waitTimeout := fs.Duration("wait-timeout", 5*time.Minute, "how long to wait for the undo call's result")
	var cf callerFlags
	cf.register(fs, c.env, "utpmesh-cli")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want 'utpmesh undo CALL_ID --turn TURN' (CALL_ID is the tool_call_id of the call to undo)")
	}
	callID := pos[0]
	if *turn == "" {
		return usagef("undo needs the call's turn: utpmesh undo %s --turn TURN (a tool_call_id is unique only within its turn; 'utpmesh call' and 'utpmesh confirm' print the exact undo command, and 'utpmesh turns ls' lists turns)", callID)
	}
	if *waitTimeout <= 0 {
		return usagef("--wait-timeout must be positive, e.g. --wait-timeout 5m")
	}
	agentID, token, err := cf.resolve()
	if err != nil {
		return err
	}
	nc, err := mf.connect(ctx, "undo")
	if err != nil {
		return err
	}
	defer nc.Close()
	ac, err := mf.agentClient(nc, pf.project, pf.channel, agentID, c.env.stderr)
	if err != nil {
		return err
	}
	defer ac.Close()
	rctx, rcancel := context.WithTimeout(ctx, mf.timeout)
	t, err := findUndo(rctx, ac.Store(), pf.project, *turn, callID)
	rcancel()
	if err != nil {
		return err
	}
	if !mf.json {
		fmt.Fprintf(c.env.stdout, "undo of %s %s (turn %s): %s %s\n", t.toolName, t.callID, t.turn, t.undo.ToolName, t.undo.Args)
	}
	wctx, cancel := context.WithTimeout(ctx, *waitTimeout)
	defer cancel()
	begin := time.Now()
	req := agent.CallRequest{ToolName: t.undo.ToolName, Arguments: t.undo.Args, AgentTurnID: t.turn, TurnEpoch: t.epoch,
		ToolCallID: undoPrefix + t.callID, Mandate: token}
	oc, err := ac.Call(wctx, req)
	var pe *agent.PendingError
	if errors.As(err, &pe) {
		return fmt.Errorf("no result after %v: the undo call %s of turn %s is still pending; it goes on, see 'utpmesh turns show %s%s'",
			time.Since(begin).Round(time.Millisecond), req.ToolCallID, t.turn, t.turn, projectArg(pf.project))
	}
	if oc == nil {
		return callErr(err)
	}
	if err != nil { // ErrNotAcked: the outcome is valid
		fmt.Fprintf(c.env.stderr, "warning: %v\n", err)
	}
	out := pendingOutput(pf.project, agentID, &oc.Call)
	out.ResultCardID, out.Status, out.AfterExecution = oc.ResultCard.CardID, oc.Result.Status, oc.AfterExecution
	out.Result, out.Error, out.DurationNS = oc.Result.Result, oc.Result.Error, time.Since(begin)
	return printOutcome(c.env, mf.json, &cf, "undo", out)
}

// undoTarget is the call whose result carries the undo step to run.
type undoTarget struct {
	turn, callID, toolName string
	epoch                  int64
	undo                   *receipts.Undo
}

// findUndo finds the undo step of call callID of turn: the one its result
// carries, or, for a confirmed PENDING_CONFIRM call, the one the confirming
// call's result carries. Every refusal says why and what to do instead.
func findUndo(ctx context.Context, st cardstore.Store, project, turn, callID string) (*undoTarget, error) {
	cards, err := cardstore.AllTurn(ctx, st, project, turn)
	if err != nil {
		return nil, fmt.Errorf("read turn %s of project %s: %w", turn, project, err)
	}
	if len(cards) == 0 {
		return nil, fmt.Errorf("project %s has no turn %s (check --turn and --project; 'utpmesh turns ls --project %s' lists turns)", project, turn, project)
	}
	call, res := callCards(cards, callID)
	if call == nil {
		return nil, fmt.Errorf("turn %s of project %s has no tool call %s (see its calls with 'utpmesh turns show %s%s')", turn, project, callID, turn, projectArg(project))
	}
	tc, err := call.ToolCall()
	if err != nil {
		return nil, fmt.Errorf("tool.call card %s of call %s: %w", call.CardID, callID, err)
	}
	if res == nil {
		return nil, fmt.Errorf("call %s (%s) of turn %s has no result yet: undo it once it has finished (see 'utpmesh turns show %s%s')", callID, tc.ToolName, turn, turn, projectArg(project))
	}
	tr, err := res.ToolResult()
	if err != nil {
		return nil, fmt.Errorf("tool.result card %s of call %s: %w", res.CardID, callID, err)
	}
	if tr.Status != card.StatusSuccess && tr.Status != card.StatusPartial {
		return nil, fmt.Errorf("%w: call %s (%s) ended %s, so it changed nothing", errUndo, callID, tc.ToolName, tr.Status)
	}
	if p, ok := pendingConfirm(tr.Result); ok {
		return confirmedUndo(ctx, st, project, turn, callID, p, cards)
	}
	u := undoStep(tr.Result)
	if u == nil {
		return nil, fmt.Errorf("%w: the result of call %s (%s) carries no undo step (read-only tools, notifications, events and workflow runs have none; docs/catalogues/atlas.md lists each tool's undo)", errUndo, callID, tc.ToolName)
	}
	if err := notUndoneYet(cards, turn, callID, project); err != nil {
		return nil, err
	}
	return &undoTarget{turn: turn, callID: callID, toolName: tc.ToolName, epoch: call.Metadata.TurnEpoch, undo: u}, nil
}

// confirmedUndo follows a PENDING_CONFIRM call to the call that resolved
// it, whose result carries the undo step of the confirmed action.
func confirmedUndo(ctx context.Context, st cardstore.Store, project, turn, callID string, p *pendingResult, cards []*card.Card) (*undoTarget, error) {
	r := receipts.Fold(project, turn, cards)
	for _, tr := range r.Transitions {
		if tr.ToolCallID != callID {
			continue
		}
		switch tr.To {
		case receipts.StatusOK:
			t, err := findUndo(ctx, st, project, tr.ByAgentTurnID, tr.ByToolCallID)
			if err != nil {
				return nil, fmt.Errorf("%s was confirmed by call %s of turn %s: %w", p.ConfirmationID, tr.ByToolCallID, tr.ByAgentTurnID, err)
			}
			return t, nil
		case receipts.StatusSkipped:
			return nil, fmt.Errorf("%w: %s %s was cancelled (%s), so it never ran", errUndo, p.ToolName, callID, p.ConfirmationID)
		default:
			return nil, fmt.Errorf("%w: %s %s was confirmed but ended %s, so it changed nothing (see 'utpmesh receipts show %s%s')", errUndo, p.ToolName, callID, tr.To, turn, projectArg(project))
		}
	}
	return nil, fmt.Errorf("%w: %s %s has not run yet, it waits for confirmation %s; to drop it, cancel it: utpmesh cancel %s%s",
		errUndo, p.ToolName, callID, p.ConfirmationID, p.ConfirmationID, projectArg(project))
}

// notUndoneYet fails when the undo call of callID exists in the turn.
func notUndoneYet(cards []*card.Card, turn, callID, project string) error {
	undoID := undoPrefix + callID
	call, res := callCards(cards, undoID)
	if call == nil {
		return nil
	}
	if res == nil {
		return fmt.Errorf("%w: call %s of turn %s is already being undone by call %s, which has no result yet (see 'utpmesh turns show %s%s')", errUndo, callID, turn, undoID, turn, projectArg(project))
	}
	tr, _ := res.ToolResult()
	if tr != nil {
		if p, ok := pendingConfirm(tr.Result); ok {
			return fmt.Errorf("%w: the undo of call %s of turn %s was started already (call %s) and waits for confirmation: utpmesh confirm %s%s (or drop it: utpmesh cancel %s%s)",
				errUndo, callID, turn, undoID, p.ConfirmationID, projectArg(project), p.ConfirmationID, projectArg(project))
		}
		if tr.Status != card.StatusSuccess && tr.Status != card.StatusPartial {
			msg := string(tr.Status)
			if tr.Error != nil {
				msg += ": " + string(tr.Error.Code) + ": " + tr.Error.Message
			}
			return fmt.Errorf("%w: the undo of call %s of turn %s was tried already (call %s) and ended %s; run the undo step by hand with 'utpmesh call' if it should be tried again", errUndo, callID, turn, undoID, msg)
		}
	}
	return fmt.Errorf("%w: call %s of turn %s was undone already by call %s at %s (see 'utpmesh turns show %s%s')",
		errUndo, callID, turn, undoID, res.CreatedAt.UTC().Format(time.RFC3339), turn, projectArg(project))
}

// callCards returns the tool.call and tool.result cards of callID in a
// turn's cards (nil when absent).
func callCards(cards []*card.Card, callID string) (call, result *card.Card) {
	for _, c := range cards {
		if c.ToolCallID != callID {
			continue
		}
		switch c.Type {
		case card.TypeToolCall:
			if call == nil {
				call = c
			}
		case card.TypeToolResult:
			result = c
		}
	}
	return call, result
}
