package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/confirm"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
	"github.com/utpmesh/utpmesh/services/atlas/utility"
)

func init() {
	register(spec{name: "confirm", order: 61, summary: "confirm a pending ATLAS call (confirm CONFIRMATION_ID)",
		make: func(e env) command { return &confirmCommand{env: e, tool: utility.ToolConfirm, name: "confirm"} }})
	register(spec{name: "cancel", order: 62, summary: "cancel a pending ATLAS call (cancel CONFIRMATION_ID)",
		make: func(e env) command { return &confirmCommand{env: e, tool: utility.ToolCancel, name: "cancel"} }})
}

// confirmCommand calls ATLAS_CONFIRM or ATLAS_CANCEL, the default
// resolvers of the confirmation convention (docs/protocol.md §19), as the
// mandate's agent, else agent "cli". A pending result that names its own
// resolvers is resolved with 'utpmesh call', as its hint says
// (printPendingConfirm).
type confirmCommand struct {
	env  env
	tool string
	name string
}

func (c *confirmCommand) Run(ctx context.Context, args []string) error {
	fs, mf := newMeshFlagSet(c.name, "utpmesh "+c.name+" CONFIRMATION_ID [--project P] [--channel C] [--turn T] [--json] [--nats URL]", c.env)
	project := fs.String("project", "demo", "project of the pending call")
	mf.project = project
	channel := fs.String("channel", agent.DefaultChannel, "channel to call on")
	turn := fs.String("turn", "", "agent_turn_id of the "+c.name+" call (default: a new cli-<uuid> turn)")
	var cf callerFlags
	cf.register(fs, c.env, "cli")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want 'utpmesh %s CONFIRMATION_ID' (the confirmation_id of a PENDING_CONFIRM result, e.g. cfm_calendar_0123456789abcdef)", c.name)
	}
	agentID, token, err := cf.resolve()
	if err != nil {
		return err
	}
	if *turn == "" {
		*turn = "cli-" + card.NewID()
	}
	nc, err := mf.connect(ctx, c.name)
	if err != nil {
		return err
	}
	defer nc.Close()
	ag, err := agent.New(nc, agent.Config{Project: *project, Channel: *channel, AgentID: agentID, Version: mf.version, Mandate: token})
	if err != nil {
		return usagef("%v", err)
	}
	defer ag.Close()
	argsJSON, _ := json.Marshal(map[string]string{"confirmation_id": pos[0]})
	cctx, cancel := context.WithTimeout(ctx, mf.timeout)
	defer cancel()
	out, err := ag.Call(cctx, agent.CallRequest{ToolName: c.tool, Arguments: argsJSON, AgentTurnID: *turn})
	if err != nil {
		return fmt.Errorf("%s %s: %w", c.tool, pos[0], err)
	}
	res := out.Result
	if mf.json {
		if err := writeJSON(c.env.stdout, res); err != nil {
			return err
		}
	} else if res.Status == card.StatusSuccess {
		var v utility.ConfirmResult
		_ = json.Unmarshal(res.Result, &v)
		fmt.Fprintf(c.env.stdout, "%s %s: %s\n", v.ToolName, v.ConfirmationID, v.Status)
		if len(v.Result) > 0 {
			fmt.Fprintf(c.env.stdout, "result: %s\n", v.Result)
		}
		if v.Undo != nil {
			fmt.Fprintf(c.env.stdout, "undo: %s %s\n", v.Undo.ToolName, v.Undo.Args)
			fmt.Fprintf(c.env.stdout, "undo it with: utpmesh undo %s --turn %s%s\n", out.Call.ToolCallID, out.Call.AgentTurnID, projectArg(*project))
		}
	}
	if res.Status != card.StatusSuccess {
		return cf.resultErr(c.name+" "+pos[0], res, *project)
	}
	return nil
}

// pendingResult is a result that waits for a human's confirmation: the
// mesh's convention (docs/protocol.md §19), of which ATLAS's
// PENDING_CONFIRM results are one.
type pendingResult = confirm.Pending

// pendingConfirm reports whether a tool result waits for confirmation
// (confirm.Parse).
func pendingConfirm(result json.RawMessage) (*pendingResult, bool) {
	return confirm.Parse(result)
}

// printPendingConfirm says what waits for confirmation and the exact
// commands that confirm or cancel it: 'utpmesh confirm' / 'utpmesh cancel'
// when p's resolvers are the convention's defaults (what those commands
// call), else 'utpmesh call' of the resolver p names.
func printPendingConfirm(w io.Writer, p *pendingResult, project string) {
	fmt.Fprintf(w, "PENDING_CONFIRM: %s did not run yet; it waits for confirmation %s\n", p.ToolName, p.ConfirmationID)
	if action := p.Summary(); action != "" {
		fmt.Fprintf(w, "  it would:   %s\n", action)
	}
	if len(p.Would) > 0 && string(p.Would) != "null" {
		var b bytes.Buffer
		if json.Compact(&b, p.Would) == nil {
			fmt.Fprintf(w, "  details:    %s\n", b.String())
		}
	}
	if p.ExpiresAt != "" {
		fmt.Fprintf(w, "  expires:    %s\n", p.ExpiresAt)
	}
	fmt.Fprintf(w, "  confirm it: %s\n", resolveCommand(p, true, project))
	fmt.Fprintf(w, "  cancel it:  %s\n", resolveCommand(p, false, project))
}

// resolveCommand is the command line that confirms p (yes) or cancels it:
// 'utpmesh confirm|cancel ID' for the default resolver (ATLAS_CONFIRM,
// ATLAS_CANCEL), else 'utpmesh call TOOL --args {"confirmation_id":ID}'.
func resolveCommand(p *pendingResult, yes bool, project string) string {
	tool, verb, def := p.Resolver(yes), "cancel", confirm.DefaultCancelTool
	if yes {
		verb, def = "confirm", confirm.DefaultConfirmTool
	}
	if tool == def {
		return "utpmesh " + verb + " " + p.ConfirmationID + projectArg(project)
	}
	args, err := confirm.Args(p.ConfirmationID)
	if err != nil { // Parse accepted an id no resolver takes
		args = []byte(`{"confirmation_id":"…"}`)
	}
	return "utpmesh call " + tool + " --args '" + string(args) + "'" + projectArg(project)
}

// undoStep returns the undo step a tool result carries (its top-level
// "undo" object, as every mutating ATLAS result has), or nil.
func undoStep(result json.RawMessage) *receipts.Undo {
	var v struct {
		Undo *receipts.Undo `json:"undo"`
	}
	if json.Unmarshal(result, &v) != nil || v.Undo == nil || v.Undo.ToolName == "" {
		return nil
	}
	return v.Undo
}
