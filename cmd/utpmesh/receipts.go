package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
)

func init() {
	register(spec{name: "receipts", order: 60, summary: "show the ATLAS receipt of a turn (receipts show TURN)",
		make: func(e env) command { return &receiptsCommand{env: e} }})
}

type receiptsCommand struct{ env env }

func (c *receiptsCommand) Run(ctx context.Context, args []string) error {
	fs, mf := newMeshFlagSet("receipts", "utpmesh receipts show TURN [--project P] [--json] [--nats URL]", c.env)
	project := fs.String("project", "demo", "project of the turn")
	mf.project = project
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || pos[0] != "show" {
		return usagef("want 'utpmesh receipts show TURN' (TURN is the agent_turn_id)")
	}
	nc, err := mf.connect(ctx, "receipts")
	if err != nil {
		return err
	}
	defer nc.Close()
	st, err := natsstore.NewClient(nc, svc.WithVersion(mf.version), svc.WithTimeout(mf.timeout))
	if err != nil {
		return err
	}
	cards, err := cardstore.AllTurn(ctx, st, *project, pos[1])
	if err != nil {
		return fmt.Errorf("read turn %s of project %s: %w", pos[1], *project, err)
	}
	if len(cards) == 0 {
		return fmt.Errorf("project %s has no turn %s (the turn is the agent_turn_id a call printed; check --project, or list turns with 'utpmesh turns ls --project %s')", *project, pos[1], *project)
	}
	r := receipts.Fold(*project, pos[1], cards)
	if mf.json {
		return writeJSON(c.env.stdout, r)
	}
	w := c.env.stdout
	fmt.Fprintf(w, "receipt of turn %s (project %s): %d ATLAS tool calls\n", r.AgentTurnID, r.ProjectID, len(r.ToolCalls))
	if len(r.ToolCalls) == 0 {
		fmt.Fprintf(w, "the turn has %d cards but no ATLAS call (see them with 'utpmesh turns show %s%s')\n", len(cards), r.AgentTurnID, projectArg(r.ProjectID))
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tTOOL\tSTATUS\tTOOL_CALL_ID\tCONFIRMATION")
	for _, tc := range r.ToolCalls {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", tc.TimestampUTC, tc.ToolName, tc.Status, tc.ToolCallID, tc.ConfirmationID)
	}
	_ = tw.Flush()
	for _, ch := range r.Changes {
		fmt.Fprintf(w, "change: %s %s %s\n", ch.Op, ch.Kind, ch.ID)
	}
	for _, u := range r.UndoSteps {
		fmt.Fprintf(w, "undo of %s: %s %s\n", u.ToolCallID, u.ToolName, u.Args)
	}
	for _, t := range r.Transitions {
		fmt.Fprintf(w, "transition: %s %s %s -> %s by %s\n", t.ConfirmationID, t.ToolName, t.From, t.To, t.ByToolCallID)
	}
	for _, e := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", e)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "error: %s %s: %s: %s\n", e.ToolCallID, e.ToolName, e.Code, e.Message)
	}
	return nil
}
