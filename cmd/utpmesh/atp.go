package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	atptools "github.com/utpmesh/utpmesh/services/atp/tools"
)

func init() {
	register(spec{name: "atp", order: 63, summary: "operate ATP bookings: atp booking create|get|transition|events",
		make: func(e env) command { return &atpCommand{env: e} }})
	register(spec{name: "hem", order: 64, summary: "operator decisions on atp_invoke_hem tasks: hem ls|confirm|decline",
		make: func(e env) command { return &hemCommand{env: e} }})
}

const atpUsage = `utpmesh atp booking create (--file FILE|- | --fixture) [--advance-to PENDING_CONFIRMATION|CONFIRMED]
                                             create a Booking Object (in INQUIRY; --advance-to walks the legal path)
utpmesh atp booking get ID                   print the whole Booking Object
utpmesh atp booking transition ID STATE [--reason R]
                                             move it (Layer-3 or tool name: PRE_JOURNEY, JOURNEY, BOOKING_SUSPENDED, RESUME…)
utpmesh atp booking events ID [--after N] [--limit N]
                                             its event log, oldest first
Common flags: --project P (default demo) --channel C --mandate FILE|TOKEN --agent A --nats URL --json`

const hemUsage = `utpmesh hem ls [--status PENDING|COMPLETE|DECLINED]
                                             atp_invoke_hem tasks, with the human_confirmation_token to confirm with
utpmesh hem confirm TASK_ID [--token T] [--note N]
                                             run the HEM: the task ends COMPLETE and the agent is woken
utpmesh hem decline TASK_ID --reason R       refuse it: the task ends DECLINED and the agent is woken
Common flags: --project P (default demo) --channel C --mandate FILE|TOKEN --agent A --nats URL --json`

// atpCommand is 'utpmesh atp booking …'.
type atpCommand struct{ env env }

// hemCommand is 'utpmesh hem …'.
type hemCommand struct{ env env }

// toolCaller holds the flags every ATP subcommand shares and makes one
// tool call with them.
type toolCaller struct {
	env     env
	name    string
	mf      meshFlags
	cf      callerFlags
	project *string
	channel *string
}

func newToolCaller(e env, name, usage string) (*toolCaller, *flag.FlagSet) {
	t := &toolCaller{env: e, name: name}
	fs := newFlagSet(name, usage, e)
	t.mf.register(fs, e)
	t.cf.register(fs, e, "cli")
	t.project = fs.String("project", "demo", "project of the booking")
	t.channel = fs.String("channel", agent.DefaultChannel, "channel to call on")
	return t, fs
}

// call makes the call and returns its successful result; a failure is an
// error naming the code and message.
func (t *toolCaller) call(ctx context.Context, tool string, args any) (json.RawMessage, error) {
	agentID, token, err := t.cf.resolve()
	if err != nil {
		return nil, err
	}
	nc, err := t.mf.connect(ctx, t.name)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	ag, err := agent.New(nc, agent.Config{Project: *t.project, Channel: *t.channel, AgentID: agentID, Version: t.mf.version, Mandate: token})
	if err != nil {
		return nil, usagef("%v", err)
	}
	defer ag.Close()
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, t.mf.timeout)
	defer cancel()
	out, err := ag.Call(cctx, agent.CallRequest{ToolName: tool, Arguments: raw, AgentTurnID: "cli-" + card.NewID()})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	if out.Result.Status != card.StatusSuccess {
		return nil, t.cf.resultErr(t.name, out.Result, *t.project)
	}
	return out.Result.Result, nil
}

func (c *atpCommand) Run(ctx context.Context, args []string) error {
	return dispatch(ctx, c.env, "atp", "Usage:\n"+atpUsage+"\n", []sub{{names: []string{"booking"}, run: func(ctx context.Context, args []string) error {
		return dispatch(ctx, c.env, "atp booking", "Usage:\n"+atpUsage+"\n", []sub{
			{names: []string{"create"}, run: c.create},
			{names: []string{"get", "show"}, run: c.get},
			{names: []string{"transition", "move"}, run: c.transition},
			{names: []string{"events", "log"}, run: c.events},
		}, args)
	}}}, args)
}

func (c *atpCommand) create(ctx context.Context, args []string) error {
	t, fs := newToolCaller(c.env, "atp booking create", atpUsage)
	file := fs.String("file", "", "JSON file of the booking (- for stdin); docs/catalogues/atp.md shows one")
	fixture := fs.Bool("fixture", false, "create the demo booking (a two-person ski week)")
	advance := fs.String("advance-to", "", "walk the new booking to PENDING_CONFIRMATION or CONFIRMED (PRE_JOURNEY)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q: pass the booking with --file FILE or --fixture", pos[0])
	}
	var booking json.RawMessage
	switch {
	case *fixture && *file != "":
		return usagef("pass --file or --fixture, not both")
	case *fixture:
		booking, _ = json.Marshal(atptools.FixtureBooking())
	case *file == "-":
		if err := json.NewDecoder(os.Stdin).Decode(&booking); err != nil {
			return usagef("--file -: stdin is not one JSON object: %v", err)
		}
	case *file != "":
		b, err := os.ReadFile(*file)
		if err != nil {
			return usagef("--file: %v", err)
		}
		if !json.Valid(b) {
			return usagef("--file %s is not valid JSON", *file)
		}
		booking = b
	default:
		return usagef("pass the booking with --file FILE (or - for stdin), or --fixture for the demo booking")
	}
	a := map[string]any{"booking": booking}
	if *advance != "" {
		a["advance_to"] = strings.ToUpper(*advance)
	}
	res, err := t.call(ctx, atptools.ToolBookingCreate, a)
	if err != nil {
		return err
	}
	if t.mf.json {
		return writeRaw(c.env, res)
	}
	var b struct {
		ID    string `json:"booking_object_id"`
		State string `json:"tool_state"`
	}
	_ = json.Unmarshal(res, &b)
	fmt.Fprintf(c.env.stdout, "booking %s created (state %s)\n", b.ID, b.State)
	return nil
}

func (c *atpCommand) get(ctx context.Context, args []string) error {
	t, fs := newToolCaller(c.env, "atp booking get", atpUsage)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want 'utpmesh atp booking get BOOKING_ID'")
	}
	res, err := t.call(ctx, atptools.ToolBookingGet, map[string]string{"booking_object_id": pos[0]})
	if err != nil {
		return err
	}
	return writeRaw(c.env, res)
}

func (c *atpCommand) transition(ctx context.Context, args []string) error {
	t, fs := newToolCaller(c.env, "atp booking transition", atpUsage)
	reason := fs.String("reason", "", "why (kept in the event log)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("want 'utpmesh atp booking transition BOOKING_ID STATE', e.g. STATE JOURNEY")
	}
	res, err := t.call(ctx, atptools.ToolBookingTransition, map[string]string{"booking_object_id": pos[0], "to": pos[1], "reason": *reason})
	if err != nil {
		return err
	}
	if t.mf.json {
		return writeRaw(c.env, res)
	}
	var r struct {
		ID    string `json:"booking_object_id"`
		Event struct {
			Data struct {
				FromTool string `json:"from_tool_state"`
				ToTool   string `json:"to_tool_state"`
			} `json:"data"`
		} `json:"event"`
	}
	_ = json.Unmarshal(res, &r)
	fmt.Fprintf(c.env.stdout, "booking %s: %s -> %s\n", r.ID, r.Event.Data.FromTool, r.Event.Data.ToTool)
	return nil
}

func (c *atpCommand) events(ctx context.Context, args []string) error {
	t, fs := newToolCaller(c.env, "atp booking events", atpUsage)
	after := fs.Int("after", 0, "only events after this sequence number")
	limit := fs.Int("limit", 0, "at most this many events (0: all, up to 1000)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want 'utpmesh atp booking events BOOKING_ID'")
	}
	if *after < 0 || *limit < 0 || *limit > 1000 {
		return usagef("--after must be ≥ 0 and --limit 0 to 1000")
	}
	a := map[string]any{"booking_object_id": pos[0], "after": *after}
	if *limit > 0 {
		a["limit"] = *limit
	}
	res, err := t.call(ctx, atptools.ToolBookingEvents, a)
	if err != nil {
		return err
	}
	if t.mf.json {
		return writeRaw(c.env, res)
	}
	var r struct {
		Events []struct {
			Seq   uint64          `json:"seq"`
			Time  string          `json:"time"`
			Type  string          `json:"type"`
			Actor string          `json:"actor"`
			Data  json.RawMessage `json:"data"`
		} `json:"events"`
	}
	_ = json.Unmarshal(res, &r)
	tw := tabwriter.NewWriter(c.env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tTYPE\tACTOR\tDATA")
	for _, e := range r.Events {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", e.Seq, e.Time, e.Type, e.Actor, cut(string(e.Data), 100))
	}
	return tw.Flush()
}

func (c *hemCommand) Run(ctx context.Context, args []string) error {
	return dispatch(ctx, c.env, "hem", "Usage:\n"+hemUsage+"\n", []sub{
		{names: []string{"ls", "list"}, run: c.ls},
		{names: []string{"confirm"}, run: c.confirm},
		{names: []string{"decline"}, run: c.decline},
	}, args)
}

func (c *hemCommand) ls(ctx context.Context, args []string) error {
	t, fs := newToolCaller(c.env, "hem ls", hemUsage)
	status := fs.String("status", "", "PENDING, COMPLETE or DECLINED (default: all)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q ('utpmesh hem ls' takes flags only)", pos[0])
	}
	a := map[string]string{}
	if *status != "" {
		a["status"] = strings.ToUpper(*status)
	}
	res, err := t.call(ctx, atptools.ToolHEMList, a)
	if err != nil {
		return err
	}
	if t.mf.json {
		return writeRaw(c.env, res)
	}
	var r struct {
		Tasks []struct {
			TaskID   string `json:"task_id"`
			HEMID    string `json:"hem_id"`
			Booking  string `json:"booking_object_id"`
			Status   string `json:"status"`
			AgentID  string `json:"agent_id"`
			Deadline string `json:"protocol_deadline"`
			Token    string `json:"human_confirmation_token"`
		} `json:"tasks"`
	}
	_ = json.Unmarshal(res, &r)
	tw := tabwriter.NewWriter(c.env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tHEM\tBOOKING\tSTATUS\tAGENT\tDEADLINE\tTOKEN")
	for _, x := range r.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.TaskID, x.HEMID, orDash(x.Booking), x.Status, x.AgentID, x.Deadline, orDash(x.Token))
	}
	return tw.Flush()
}

func (c *hemCommand) confirm(ctx context.Context, args []string) error {
	t, fs := newToolCaller(c.env, "hem confirm", hemUsage)
	token := fs.String("token", "", "the task's human_confirmation_token (from 'utpmesh hem ls'), when its HEM needs one")
	note := fs.String("note", "", "a note kept with the decision")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want 'utpmesh hem confirm TASK_ID' ('utpmesh hem ls' lists the tasks)")
	}
	res, err := t.call(ctx, atptools.ToolHEMConfirm, map[string]string{"task_id": pos[0], "human_confirmation_token": *token, "note": *note})
	if err != nil {
		return err
	}
	return c.print(t, res)
}

func (c *hemCommand) decline(ctx context.Context, args []string) error {
	t, fs := newToolCaller(c.env, "hem decline", hemUsage)
	reason := fs.String("reason", "", "why (the agent reads it); required")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want 'utpmesh hem decline TASK_ID --reason R'")
	}
	if strings.TrimSpace(*reason) == "" {
		return usagef("--reason is required: the agent that escalated reads it")
	}
	res, err := t.call(ctx, atptools.ToolHEMDecline, map[string]string{"task_id": pos[0], "reason": *reason})
	if err != nil {
		return err
	}
	return c.print(t, res)
}

func (c *hemCommand) print(t *toolCaller, res json.RawMessage) error {
	if t.mf.json {
		return writeRaw(c.env, res)
	}
	var r map[string]any
	_ = json.Unmarshal(res, &r)
	fmt.Fprintf(c.env.stdout, "task %v: %v", r["task_id"], r["status"])
	if o, ok := r["hem_outcome"]; ok {
		fmt.Fprintf(c.env.stdout, " (%v, decision %v)", o, r["decision_object_id"])
	}
	if why, ok := r["reason"]; ok {
		fmt.Fprintf(c.env.stdout, " (%v)", why)
	}
	fmt.Fprintln(c.env.stdout)
	return nil
}

func writeRaw(e env, raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	return writeJSON(e.stdout, v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
