package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/turn"
)

func init() {
	register(spec{name: "turns", order: 60, summary: "inspect turns from the CardStore: ls, show, replay, resume",
		make: func(e env) command { return &turnsCommand{env: e} }})
}

type turnsCommand struct{ env env }

const turnsUsage = `Usage: utpmesh turns <ls|show|replay|resume> [flags]

  ls --agent A      the agent's turns that have tool results (from its inbox)
  show TURN         every tool call of the turn with its result, in order
  replay TURN       re-run the turn's calls under a new turn id and diff the
                    results with the recorded ones (--dry-run: the plan only)
  resume TURN       which calls have no result yet, which results are not
                    consumed, by step_id

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
	}, args)
}

// oneTurn checks the positional arguments of show, replay and resume.
func oneTurn(pos []string, sub string) (string, error) {
	switch len(pos) {
	case 1:
		return pos[0], nil
	case 0:
		return "", usagef("name the turn, e.g. 'utpmesh turns %s TURN_ID' (find turns with 'utpmesh turns ls --agent AGENT')", sub)
	}
	return "", usagef("'turns %s' takes one turn id, got %d: %v", sub, len(pos), pos)
}

// load connects and reconstructs the turn.
func (c *turnsCommand) load(ctx context.Context, mf *meshFlags, pf *projectFlags, id, name string) (*nats.Conn, *turn.Turn, error) {
	if err := card.ValidateName("project_id", pf.project); err != nil {
		return nil, nil, usagef("--project: %v", err)
	}
	nc, err := mf.connect(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	store, err := natsstore.NewClient(nc, natsstore.WithVersion(mf.version), natsstore.WithChannel(pf.channel), natsstore.WithTimeout(mf.timeout))
	if err != nil {
		nc.Close()
		return nil, nil, usagef("%v", err)
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
	fs := newFlagSet("turns show", "utpmesh turns show TURN [--project P] [--json]", c.env)
	var mf meshFlags
	var pf projectFlags
	mf.register(fs, c.env)
	pf.register(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := oneTurn(pos, "show")
	if err != nil {
		return err
	}
	nc, t, err := c.load(ctx, &mf, &pf, id, "turns")
	if err != nil {
		return err
	}
	defer nc.Close()
	if mf.json {
		return writeJSON(c.env.stdout, t)
	}
	return turn.WriteTimeline(c.env.stdout, t)
}

func (c *turnsCommand) replay(ctx context.Context, args []string) error {
	fs := newFlagSet("turns replay", "utpmesh turns replay TURN [--dry-run] [--as NEW_TURN] [--agent A] [--concurrency N] [--project P] [--json]", c.env)
	var mf meshFlags
	var pf projectFlags
	mf.register(fs, c.env)
	pf.register(fs)
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
	nc, t, err := c.load(ctx, &mf, &pf, id, "replay")
	if err != nil {
		return err
	}
	defer nc.Close()
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
	fs := newFlagSet("turns resume", "utpmesh turns resume TURN [--agent A] [--project P] [--json]", c.env)
	var mf meshFlags
	var pf projectFlags
	mf.register(fs, c.env)
	pf.register(fs)
	agentID := fs.String("agent", "", "the agent whose inbox to read (default: the agent_id on the turn's cards)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := oneTurn(pos, "resume")
	if err != nil {
		return err
	}
	nc, t, err := c.load(ctx, &mf, &pf, id, "turns")
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

// turnSummary is one row of `turns ls`.
type turnSummary struct {
	AgentTurnID string    `json:"agent_turn_id"`
	TurnEpoch   int64     `json:"turn_epoch"`
	Results     int       `json:"results"`
	Pending     int       `json:"pending"`
	Acked       int       `json:"acked"`
	Stale       int       `json:"stale"`
	LastAt      time.Time `json:"last_at"`
}

func (c *turnsCommand) ls(ctx context.Context, args []string) error {
	fs := newFlagSet("turns ls", "utpmesh turns ls --agent A [--project P] [--pending] [--json]\n\nLists the agent's turns that have tool results, from its inbox entries, newest\nfirst. (The CardStore has no listing of turns; a turn whose calls have no\nresult yet does not show up here: look it up with 'turns show TURN'.)", c.env)
	var mf meshFlags
	var pf projectFlags
	mf.register(fs, c.env)
	pf.register(fs)
	agentID := fs.String("agent", "", "the agent whose turns to list (required)")
	onlyPending := fs.Bool("pending", false, "only turns with results the agent has not consumed")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q (to show one turn: utpmesh turns show %s)", pos[0], pos[0])
	}
	if *agentID == "" {
		return usagef("--agent is required: turns are listed from the agent's inbox (e.g. --agent utpmesh-cli)")
	}
	if err := card.ValidateName("project_id", pf.project); err != nil {
		return usagef("--project: %v", err)
	}
	nc, err := mf.connect(ctx, "turns")
	if err != nil {
		return err
	}
	defer nc.Close()
	ic, err := inbox.NewClient(nc, inbox.WithVersion(mf.version), inbox.WithChannel(pf.channel), inbox.WithTimeout(mf.timeout))
	if err != nil {
		return usagef("%v", err)
	}
	state := inbox.StateAll
	if *onlyPending {
		state = inbox.StatePending
	}
	entries, err := listEntries(ctx, ic, pf.project, inbox.ListQuery{AgentID: *agentID, State: state})
	if err != nil {
		return fmt.Errorf("list the inbox of agent %s: %w", *agentID, err)
	}
	byTurn := map[string]*turnSummary{}
	var list []*turnSummary
	for _, e := range entries {
		s := byTurn[e.AgentTurnID]
		if s == nil {
			s = &turnSummary{AgentTurnID: e.AgentTurnID}
			byTurn[e.AgentTurnID] = s
			list = append(list, s)
		}
		s.Results++
		s.TurnEpoch = max(s.TurnEpoch, e.TurnEpoch)
		switch e.State {
		case inbox.StatePending:
			s.Pending++
		case inbox.StateAcked:
			s.Acked++
		case inbox.StateStale:
			s.Stale++
		}
		if e.CreatedAt.After(s.LastAt) {
			s.LastAt = e.CreatedAt
		}
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].LastAt.After(list[j].LastAt) })
	if mf.json {
		if list == nil {
			list = []*turnSummary{}
		}
		return writeJSON(c.env.stdout, list)
	}
	if len(list) == 0 {
		fmt.Fprintf(c.env.stdout, "agent %s has no turns with results in project %s\n", *agentID, pf.project)
		return nil
	}
	tw := tabwriter.NewWriter(c.env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TURN\tEPOCH\tRESULTS\tPENDING\tACKED\tSTALE\tLAST RESULT")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", s.AgentTurnID, s.TurnEpoch, s.Results, s.Pending, s.Acked, s.Stale, s.LastAt.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

// listEntries follows the inbox's pages.
func listEntries(ctx context.Context, ic *inbox.Client, project string, q inbox.ListQuery) ([]inbox.Entry, error) {
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
