package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
)

func init() {
	register(spec{name: "call", order: 40, summary: "make a real tool call from the shell and print its result",
		make: func(e env) command { return &callCommand{env: e} }})
}

type callCommand struct{ env env }

// callOutput is what `call --json` prints.
type callOutput struct {
	ProjectID      string              `json:"project_id"`
	AgentID        string              `json:"agent_id"`
	AgentTurnID    string              `json:"agent_turn_id"`
	TurnEpoch      int64               `json:"turn_epoch"`
	StepID         string              `json:"step_id"`
	ToolCallID     string              `json:"tool_call_id"`
	ToolName       string              `json:"tool_name"`
	ToolCallCardID string              `json:"tool_call_card_id"`
	TargetSubject  string              `json:"target_subject"`
	ResultCardID   string              `json:"tool_result_card_id,omitempty"`
	Status         card.Status         `json:"status,omitempty"`
	AfterExecution card.AfterExecution `json:"after_execution,omitempty"`
	Result         json.RawMessage     `json:"result,omitempty"`
	Error          *card.Error         `json:"error,omitempty"`
	DurationNS     time.Duration       `json:"duration_ns,omitempty"`
}

func (c *callCommand) Run(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("call", "utpmesh call TOOL [--args '{...}'|@FILE] [--project P] [--channel C] [--turn T] [--wait=false] [--json]", c.env)
	argsFlag := fs.String("args", "{}", "the call's arguments: a JSON object, or @FILE to read it from a file")
	var cf callerFlags
	cf.register(fs, c.env, "utpmesh-cli")
	turnID := fs.String("turn", "", "agent_turn_id of the call (default: a new cli-<uuid> turn)")
	epoch := fs.Int64("epoch", 0, "turn_epoch of the call")
	step := fs.String("step", "", "step_id of the call (default: a new UUIDv7)")
	callID := fs.String("tool-call-id", "", "tool_call_id (default: a new UUIDv7; reusing one of the turn's ids returns its existing result)")
	ae := fs.String("after-execution", "", "override the registry's after_execution: suspend or terminate")
	wait := fs.Bool("wait", true, "wait for the result; --wait=false only writes the tool.call card and publishes the command")
	waitTimeout := fs.Duration("wait-timeout", 5*time.Minute, "how long to wait for the result before giving up (the call goes on)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		if len(pos) == 0 {
			return usagef("name the tool to call, e.g. utpmesh call echo --args '{\"x\":1}' (list tools with 'utpmesh tools ls')")
		}
		return usagef("call takes one tool name, got %d arguments: %s (quote the --args JSON)", len(pos), strings.Join(pos, " "))
	}
	tool := pos[0]
	arguments, err := readArgs(*argsFlag)
	if err != nil {
		return err
	}
	agentID, token, err := cf.resolve()
	if err != nil {
		return err
	}
	if *ae != "" && !card.AfterExecution(*ae).Valid() {
		return usagef("--after-execution %q: use suspend or terminate", *ae)
	}
	if *waitTimeout <= 0 {
		return usagef("--wait-timeout must be positive, e.g. --wait-timeout 5m")
	}
	if *turnID == "" {
		*turnID = "cli-" + card.NewID()
	}
	nc, err := mf.connect(ctx, "call")
	if err != nil {
		return err
	}
	defer nc.Close()
	ac, err := mf.agentClient(nc, pf.project, pf.channel, agentID, c.env.stderr)
	if err != nil {
		return err
	}
	defer ac.Close()
	req := agent.CallRequest{ToolName: tool, Arguments: arguments, AgentTurnID: *turnID, TurnEpoch: *epoch,
		StepID: *step, ToolCallID: *callID, AfterExecution: card.AfterExecution(*ae), Mandate: token}
	if !*wait {
		pd, err := ac.Dispatch(ctx, req)
		if err != nil {
			return callErr(err)
		}
		out := pendingOutput(pf.project, agentID, pd)
		if mf.json {
			return writeJSON(c.env.stdout, out)
		}
		fmt.Fprintf(c.env.stdout, "dispatched %s  tool_call_id %s  turn %s\n", tool, pd.ToolCallID, pd.AgentTurnID)
		fmt.Fprintf(c.env.stdout, "see its result with: utpmesh turns show %s --project %s\n", pd.AgentTurnID, pf.project)
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, *waitTimeout)
	defer cancel()
	begin := time.Now()
	oc, err := ac.Call(wctx, req)
	var pe *agent.PendingError
	if errors.As(err, &pe) {
		return fmt.Errorf("no result after %v: tool_call_id %s of turn %s is still pending; it goes on, see 'utpmesh turns resume %s --agent %s --project %s'",
			time.Since(begin).Round(time.Millisecond), pe.Pending.ToolCallID, pe.Pending.AgentTurnID, pe.Pending.AgentTurnID, agentID, pf.project)
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
	return printOutcome(c.env, mf.json, &cf, "call", out)
}

// printOutcome prints a finished call (as JSON with asJSON) and returns
// the error of a call that did not succeed. A PENDING_CONFIRM result shows
// what waits and the commands that confirm or cancel it; a result that
// carries an undo step shows the command that undoes it.
func printOutcome(e env, asJSON bool, cf *callerFlags, what string, out callOutput) error {
	if asJSON {
		if err := writeJSON(e.stdout, out); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stdout, "%s · %s · %s · tool_call_id %s · turn %s\n", out.Status, out.AfterExecution,
			out.DurationNS.Round(time.Millisecond), out.ToolCallID, out.AgentTurnID)
		if p, ok := pendingConfirm(out.Result); ok {
			printPendingConfirm(e.stdout, p, out.ProjectID)
		} else if len(out.Result) > 0 && out.Error == nil { // a failure is said on stderr
			var v any
			if json.Unmarshal(out.Result, &v) == nil {
				_ = writeJSON(e.stdout, v)
			} else {
				fmt.Fprintln(e.stdout, string(out.Result))
			}
			if u := undoStep(out.Result); u != nil {
				fmt.Fprintf(e.stdout, "undo it with: utpmesh undo %s --turn %s%s\n", out.ToolCallID, out.AgentTurnID, projectArg(out.ProjectID))
			}
		}
	}
	if out.Status == card.StatusSuccess || out.Status == card.StatusPartial {
		return nil
	}
	return cf.resultErr(what, &card.ToolResultContent{Status: out.Status, Error: out.Error}, out.ProjectID)
}

// projectArg is " --project P" for a project other than the CLI's default.
func projectArg(project string) string {
	if project == "" || project == "demo" {
		return ""
	}
	return " --project " + project
}

func pendingOutput(project, agentID string, pd *agent.Pending) callOutput {
	return callOutput{ProjectID: project, AgentID: agentID, AgentTurnID: pd.AgentTurnID, TurnEpoch: pd.TurnEpoch, StepID: pd.StepID,
		ToolCallID: pd.ToolCallID, ToolName: pd.ToolName, ToolCallCardID: pd.ToolCallCardID, TargetSubject: pd.TargetSubject}
}

// callErr turns request mistakes into usage errors (exit 2).
func callErr(err error) error {
	if errors.Is(err, agent.ErrInvalid) || errors.Is(err, agent.ErrUnknownTool) {
		msg := err.Error()
		if errors.Is(err, agent.ErrUnknownTool) {
			msg += " (list the tools with 'utpmesh tools ls')"
		}
		return usagef("%s", msg)
	}
	return err
}

// readArgs reads --args: inline JSON or @FILE; it must be a JSON object.
func readArgs(v string) (json.RawMessage, error) {
	data := []byte(v)
	if strings.HasPrefix(v, "@") {
		b, err := os.ReadFile(v[1:])
		if err != nil {
			return nil, usagef("--args %s: %v", v, err)
		}
		data = b
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		return nil, usagef("--args must be a JSON object, e.g. --args '{\"city\":\"Oslo\"}' (got %s)", cut(string(data), 60))
	}
	return json.RawMessage(data), nil
}
