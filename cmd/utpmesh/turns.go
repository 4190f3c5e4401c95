package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/natsinbox"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/turn"
)

func init() {
	register(spec{name: "turns", order: 60, summary: "inspect turns from the CardStore: ls, show, replay, resume; retention, export, gc",
		make: func(e env) command { return &turnsCommand{env: e} }})
}

type turnsCommand struct{ env env }

const turnsUsage = `Usage: utpmesh turns <ls|show|replay|resume|retention|export|gc> [flags]

  ls                the project's turns, newest first (--agent A: one agent's;
                    --pending: those with results the agent has not consumed)
  show TURN         every tool call of the turn with its result, in order, and
                    the card ids of each call
  replay TURN       re-run the turn's calls under a new turn id and diff the
                    results with the recorded ones (--dry-run: the plan only)
  resume TURN       which calls have no result yet, which results are not
                    consumed, by step_id
  retention         print or set the project's retention policy (--max-age,
                    --max-bytes; admin)
  export FILE       write turns as JSON lines, one card per line (--turn,
                    --before)
  gc                archive and delete the turns past the retention policy
                    now (--dry-run: list them only; admin)

Exit codes: 0 ok (replay: every call came out equal), 1 failure (replay: a
call differs or could not be made), 2 usage.
Run 'utpmesh turns <subcommand> --help' for the flags.
`

func (c *turnsCommand) Run(ctx context.Context, args []string) error {
	return dispatch(ctx, c.env, "turns", turnsUsage, []sub{
		{[]string{"ls", "list"}, c.ls},
		{[]string{"show"}, c.show},
		{[]string{"replay"}, c.replay},
		{[]string{"resume"}, c.resume},
		{[]string{"retention"}, c.retention},
		{[]string{"export"}, c.export},
		{[]string{"gc"}, c.gc},
	}, args)
}

// oneTurn checks the positional arguments of show, replay and resume.
func oneTurn(pos []string, sub string) (string, error) {
	switch len(pos) {
	case 1:
		return pos[0], nil
	case 0:
		return "", usagef("name the turn, e.g. 'utpmesh turns %s TURN_ID' (find turns with 'utpmesh turns ls')", sub)
	}
	return "", usagef("'turns %s' takes one turn id, got %d: %v", sub, len(pos), pos)
}

// load connects and reconstructs the turn.
func (c *turnsCommand) load(ctx context.Context, mf *meshFlags, pf *projectFlags, id, name string) (*nats.Conn, *turn.Turn, error) {
	if err := card.ValidateName("project_id", pf.project); err != nil {
		return nil, nil, usagef("--project: %v", err)
	}
	nc, store, err := openStore(ctx, mf, pf, name)
	if err != nil {
		return nil, nil, err
	}
	t, err := turn.Load(ctx, store, pf.project, id)
	if err != nil {
		nc.Close()
		if errors.Is(err, turn.ErrInvalid) {
			return nil, nil, usagef("%v", err)
		}
		if errors.Is(err, turn.ErrNotFound) {
			return nil, nil, fmt.Errorf("%w (is the project right? --project %s)", err, pf.project)
		}
		return nil, nil, err
	}
	return nc, t, nil
}

func (c *turnsCommand) show(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("turns show", "utpmesh turns show TURN [--project P] [--json]", c.env)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := oneTurn(pos, "show")
	if err != nil {
		return err
	}
	nc, t, err := c.load(ctx, mf, pf, id, "turns")
	if err != nil {
		return err
	}
	defer nc.Close()
	if mf.json {
		return writeJSON(c.env.stdout, t)
	}
	// One buffer for both parts: the call table's tabwriter writes every
	// cell on its own, a system call each on an unbuffered stdout.
	bw := bufio.NewWriterSize(c.env.stdout, 64<<10)
	if err := turn.WriteTimeline(bw, t); err != nil {
		return err
	}
	if err := writeCallCards(bw, t); err != nil {
		return err
	}
	return bw.Flush()
}

// writeCallCards prints, for each call of the turn, the ids of its
// tool.call and tool.result cards next to its tool_call_id: the timeline
// names calls by tool_call_id, 'cards get' wants card ids (or the
// tool_call_id with --turn).
func writeCallCards(w io.Writer, t *turn.Turn) error {
	if len(t.Calls) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\ncards of each call (print them: utpmesh cards get CARD_ID..., or utpmesh cards get TOOL_CALL_ID --turn %s):\n", t.AgentTurnID)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL_CALL_ID\tTOOL.CALL CARD\tTOOL.RESULT CARD")
	for _, cl := range t.Calls {
		callID, resultID := cl.CallCardID, cl.ResultCardID
		if callID == "" {
			callID = "(missing)"
		}
		if resultID == "" {
			resultID = "(none yet)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", cl.ToolCallID, callID, resultID)
	}
	return tw.Flush()
}

func (c *turnsCommand) replay(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("turns replay", "utpmesh turns replay TURN [--dry-run] [--as NEW_TURN] [--agent A] [--concurrency N] [--project P] [--json]", c.env)
	dry := fs.Bool("dry-run", false, "print the plan; run nothing")
	as := fs.String("as", "", "turn id to replay under (default: a new replay-<uuid>); never the original's")
	var cf callerFlags
	cf.register(fs, c.env, "")
	conc := fs.Int("concurrency", 1, "calls run at once (1: one after the other, in the original order)")
	waitTimeout := fs.Duration("wait-timeout", 30*time.Minute, "how long the whole replay may take")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := oneTurn(pos, "replay")
	if err != nil {
		return err
	}
	if *conc < 1 {
		return usagef("--concurrency must be at least 1")
	}
	if *waitTimeout <= 0 {
		return usagef("--wait-timeout must be positive, e.g. --wait-timeout 30m")
	}
	nc, t, err := c.load(ctx, mf, pf, id, "replay")
	if err != nil {
		return err
	}
	defer nc.Close()
	cf.noDemo = true // the recorded mandates bind the original agent
	agentID, token, err := cf.resolve()
	if err != nil {
		return err
	}
	if agentID == "" {
		// The recorded calls' mandates name the original agent, and
		// policies may depend on it: replay as that agent by default.
		agentID = t.AgentID
	}
	if agentID == "" {
		agentID = "utpmesh-replay"
	}
	opts := turn.ReplayOptions{NewTurnID: *as, Concurrency: *conc, Mandate: token}
	if token == "" {
		// Admitted calls keep only their mandate's hash: the demo mandate
		// of a local 'up' is used for the calls it is the recorded one of.
		if b, err := os.ReadFile(demoMandatePath); err == nil {
			opts.Known = []string{strings.TrimSpace(string(b))}
		}
	}
	if *dry {
		p, err := turn.PlanReplay(t, opts)
		if err != nil {
			return planErr(err)
		}
		if mf.json {
			return writeJSON(c.env.stdout, p)
		}
		return turn.WritePlan(c.env.stdout, p)
	}
	ac, err := mf.agentClient(nc, pf.project, pf.channel, agentID, c.env.stderr)
	if err != nil {
		return err
	}
	defer ac.Close()
	pr := newProgress(c.env.stderr, "replaying")
	opts.Progress = pr.step
	rctx, cancel := context.WithTimeout(ctx, *waitTimeout)
	defer cancel()
	rep, err := turn.Replay(rctx, ac, t, opts)
	pr.end()
	if rep == nil {
		return planErr(err)
	}
	if mf.json {
		if werr := writeJSON(c.env.stdout, rep); werr != nil {
			return werr
		}
	} else if werr := turn.WriteReport(c.env.stdout, rep); werr != nil {
		return werr
	}
	switch {
	case err != nil:
		return err
	case rep.Errors > 0:
		return fmt.Errorf("%d of %d calls could not be replayed", rep.Errors, len(rep.Calls))
	case rep.Different > 0:
		return fmt.Errorf("%d of %d calls came out different (see the changes above)", rep.Different, len(rep.Calls))
	}
	return nil
}

func planErr(err error) error {
	if errors.Is(err, turn.ErrInvalid) {
		return usagef("%v", err)
	}
	return err
}

func (c *turnsCommand) resume(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("turns resume", "utpmesh turns resume TURN [--agent A] [--project P] [--json]", c.env)
	agentID := fs.String("agent", "", "the agent whose inbox to read (default: the agent_id on the turn's cards)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := oneTurn(pos, "resume")
	if err != nil {
		return err
	}
	nc, t, err := c.load(ctx, mf, pf, id, "turns")
	if err != nil {
		return err
	}
	defer nc.Close()
	if *agentID == "" {
		if t.AgentID == "" {
			return usagef("the cards of turn %s name no agent_id; pass --agent", id)
		}
		*agentID = t.AgentID
	}
	ac, err := mf.agentClient(nc, pf.project, pf.channel, *agentID, c.env.stderr)
	if err != nil {
		return err
	}
	defer ac.Close()
	r, err := turn.Resume(ctx, ac, id)
	if err != nil {
		return err
	}
	if mf.json {
		return writeJSON(c.env.stdout, r)
	}
	return turn.WriteResume(c.env.stdout, r)
}

// turnRow is one row of `turns ls`: the store's summary of the turn and,
// with --pending, how many of its results the agent has not consumed.
type turnRow struct {
	cardstore.TurnInfo
	Pending int `json:"pending,omitempty"`
}

// turnsPage is what `turns ls --json` prints. Next is the --before cursor
// of the next (older) page; 0 when there is none.
type turnsPage struct {
	Turns []turnRow `json:"turns"`
	Next  uint64    `json:"next,omitempty"`
}

const turnsLsSynopsis = `utpmesh turns ls [--agent A] [--limit N] [--before CURSOR] [--pending] [--project P] [--json]

Lists the project's turns from the CardStore, newest first (by each turn's
first card), --limit at a time; when older turns follow, the last line
says how to list them (--before CURSOR). --agent keeps the turns of one
agent (the first metadata.agent_id the turn's cards name). --pending, with
--agent, keeps the turns that have results the agent has not consumed
yet, from its inbox.`

func (c *turnsCommand) ls(ctx context.Context, args []string) error {
	fs, mf, pf := newProjectFlagSet("turns ls", turnsLsSynopsis, c.env)
	agentID := fs.String("agent", "", "only the turns of this agent (default: every agent's)")
	limit := fs.Int("limit", 20, fmt.Sprintf("turns per page, 1 to %d", cardstore.MaxPage))
	before := fs.Uint64("before", 0, "list the turns older than this cursor (printed under the previous page)")
	onlyPending := fs.Bool("pending", false, "only turns with results the agent (--agent) has not consumed")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q (to show one turn: utpmesh turns show %s)", pos[0], pos[0])
	}
	if *limit < 1 || *limit > cardstore.MaxPage {
		return usagef("--limit %d: give a number from 1 to %d, e.g. --limit 50", *limit, cardstore.MaxPage)
	}
	if *onlyPending && *agentID == "" {
		return usagef("--pending needs --agent: unconsumed results are kept per agent, in its inbox (e.g. --agent demo-agent; the AGENT column of 'utpmesh turns ls' names them)")
	}
	if *onlyPending && *before != 0 {
		return usagef("--pending lists every turn with unconsumed results at once; drop --before (raise --limit to see more)")
	}
	if err := card.ValidateName("project_id", pf.project); err != nil {
		return usagef("--project: %v", err)
	}
	nc, store, err := openStore(ctx, mf, pf, "turns")
	if err != nil {
		return err
	}
	defer nc.Close()
	var page *turnsPage
	var more int // --pending: turns left out by --limit
	if *onlyPending {
		page, more, err = c.pendingTurns(ctx, nc, store, mf, pf, *agentID, *limit)
	} else {
		var res *cardstore.ListTurnsResult
		res, err = store.ListTurns(ctx, cardstore.ListTurnsRequest{ProjectID: pf.project, AgentID: *agentID, Before: *before, Limit: *limit})
		if errors.Is(err, cardstore.ErrInvalid) {
			return usagef("%v", err)
		}
		if err == nil {
			page = &turnsPage{Turns: make([]turnRow, len(res.Turns)), Next: res.Next}
			for i, ti := range res.Turns {
				page.Turns[i] = turnRow{TurnInfo: ti}
			}
		}
	}
	if err != nil {
		return err
	}
	if mf.json {
		return writeJSON(c.env.stdout, page)
	}
	if len(page.Turns) == 0 {
		switch {
		case *onlyPending:
			fmt.Fprintf(c.env.stdout, "agent %s has no unconsumed results in project %s\n", *agentID, pf.project)
		case *before != 0:
			fmt.Fprintf(c.env.stdout, "project %s has no turns older than cursor %d\n", pf.project, *before)
		case *agentID != "":
			fmt.Fprintf(c.env.stdout, "agent %s has no turns in project %s (without --agent: every agent's turns)\n", *agentID, pf.project)
		default:
			fmt.Fprintf(c.env.stdout, "project %s has no turns yet\n", pf.project)
		}
		return nil
	}
	tw := tabwriter.NewWriter(c.env.stdout, 0, 4, 2, ' ', 0)
	head := "TURN\tAGENT\tCALLS\tRESULTS\tCARDS\tFIRST CARD\tLAST CARD"
	if *onlyPending {
		head += "\tPENDING"
	}
	fmt.Fprintln(tw, head)
	for _, r := range page.Turns {
		agent := r.AgentID
		if agent == "" {
			agent = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s", r.AgentTurnID, agent, r.ToolCalls, r.ToolResults, r.Cards,
			r.FirstAt.UTC().Format(time.RFC3339), r.LastAt.UTC().Format(time.RFC3339))
		if *onlyPending {
			fmt.Fprintf(tw, "\t%d", r.Pending)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if more > 0 {
		fmt.Fprintf(c.env.stdout, "%s with unconsumed results not shown: raise --limit (now %d)\n", plural(more, "older turn", "older turns"), *limit)
	}
	if page.Next != 0 {
		cmd := []string{"utpmesh turns ls", fmt.Sprintf("--before %d", page.Next)}
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "agent", "limit", "project", "channel", "nats", "protocol":
				cmd = append(cmd, fmt.Sprintf("--%s %s", f.Name, f.Value))
			}
		})
		fmt.Fprintf(c.env.stdout, "older turns follow: %s\n", strings.Join(cmd, " "))
	}
	return nil
}

// pendingTurns lists the turns that have results the agent has not
// consumed: the turn ids come from the agent's inbox, the summaries from
// the store's turn list (walked newest first until every such turn is
// found). At most limit turns are returned, newest first; more counts the
// turns with unconsumed results left out.
func (c *turnsCommand) pendingTurns(ctx context.Context, nc *nats.Conn, store cardstore.Store, mf *meshFlags, pf *projectFlags, agentID string, limit int) (page *turnsPage, more int, err error) {
	ic, err := natsinbox.NewClient(nc, svc.WithVersion(mf.version), svc.WithChannel(pf.channel), svc.WithTimeout(mf.timeout))
	if err != nil {
		return nil, 0, usagef("%v", err)
	}
	entries, err := listEntries(ctx, ic, pf.project, inbox.ListQuery{AgentID: agentID, State: inbox.StatePending})
	if err != nil {
		return nil, 0, fmt.Errorf("list the inbox of agent %s: %w", agentID, err)
	}
	pending := map[string]int{}
	for _, e := range entries {
		pending[e.AgentTurnID]++
	}
	page = &turnsPage{Turns: []turnRow{}}
	req := cardstore.ListTurnsRequest{ProjectID: pf.project, Limit: cardstore.MaxPage}
	for found := 0; found < len(pending) && len(page.Turns) < limit; {
		res, err := store.ListTurns(ctx, req)
		if err != nil {
			return nil, 0, err
		}
		for _, ti := range res.Turns {
			if n := pending[ti.AgentTurnID]; n > 0 {
				found++
				if len(page.Turns) < limit {
					page.Turns = append(page.Turns, turnRow{TurnInfo: ti, Pending: n})
				}
			}
		}
		if res.Next == 0 {
			break
		}
		req.Before = res.Next
	}
	if len(page.Turns) < limit {
		return page, 0, nil // every turn with unconsumed results is shown
	}
	return page, len(pending) - len(page.Turns), nil
}

// listEntries follows the inbox's pages.
func listEntries(ctx context.Context, ic *natsinbox.Client, project string, q inbox.ListQuery) ([]inbox.Entry, error) {
	var out []inbox.Entry
	q.Limit = inbox.MaxList
	for {
		page, err := ic.List(ctx, project, q)
		if err != nil {
			return out, err
		}
		out = append(out, page...)
		if len(page) < inbox.MaxList {
			return out, nil
		}
		q.After = page[len(page)-1].InboxID
	}
}
