package atpcli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/utpmesh/utpmesh/pkg/cli"
	atptools "github.com/utpmesh/utpmesh/services/atp/tools"
)

// Verbs are ATP's verbs of the command line: `utpmesh atp` and
// `utpmesh hem`.
func Verbs() []cli.Verb { return []cli.Verb{atpVerb{}, hemVerb{}} }

var (
	_ cli.Verb = atpVerb{}
	_ cli.Verb = hemVerb{}
)

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
utpmesh hem confirm TASK_ID [--token T] [--note N] [--parent-mandate FILE|TOKEN]
                                             run the HEM: the task ends COMPLETE and the agent is woken; a
                                             HEM-MANDATE-01 expansion issues the agent a sub-mandate narrowed
                                             from --parent-mandate (the mandate the agent's was narrowed from)
utpmesh hem decline TASK_ID --reason R       refuse it: the task ends DECLINED and the agent is woken
Calls are the operator's: --creds FILE (default ./utpmesh-data/creds/operator.nk, the operator identity of a local 'utpmesh up')
Common flags: --project P (default demo) --channel C --creds FILE --nats URL --json`

// projectHelp is the help of --project.
const projectHelp = "project of the booking"

// atpVerb is 'utpmesh atp booking …'.
type atpVerb struct{}

// Name implements cli.Verb.
func (atpVerb) Name() string { return "atp" }

// Summary implements cli.Verb.
func (atpVerb) Summary() string {
	return "operate ATP bookings: atp booking create|get|transition|events"
}

// Order implements cli.Verb.
func (atpVerb) Order() int { return 63 }

// Run implements cli.Verb.
func (atpVerb) Run(ctx context.Context, env cli.Env, args []string) error {
	c := &atpCommand{env: env}
	return c.Run(ctx, args)
}

// hemVerb is 'utpmesh hem …'.
type hemVerb struct{}

// Name implements cli.Verb.
func (hemVerb) Name() string { return "hem" }

// Summary implements cli.Verb.
func (hemVerb) Summary() string {
	return "operator decisions on atp_invoke_hem tasks: hem ls|confirm|decline"
}

// Order implements cli.Verb.
func (hemVerb) Order() int { return 64 }

// Run implements cli.Verb.
func (hemVerb) Run(ctx context.Context, env cli.Env, args []string) error {
	c := &hemCommand{env: env}
	return c.Run(ctx, args)
}

// atpCommand runs 'utpmesh atp booking …' in env.
type atpCommand struct{ env cli.Env }

// hemCommand runs 'utpmesh hem …' in env.
type hemCommand struct{ env cli.Env }

func (c *atpCommand) Run(ctx context.Context, args []string) error {
	return c.env.Dispatch(ctx, "atp", "Usage:\n"+atpUsage+"\n", []cli.Sub{{Names: []string{"booking"}, Run: func(ctx context.Context, args []string) error {
		return c.env.Dispatch(ctx, "atp booking", "Usage:\n"+atpUsage+"\n", []cli.Sub{
			{Names: []string{"create"}, Run: c.create},
			{Names: []string{"get", "show"}, Run: c.get},
			{Names: []string{"transition", "move"}, Run: c.transition},
			{Names: []string{"events", "log"}, Run: c.events},
		}, args)
	}}}, args)
}

func (c *atpCommand) create(ctx context.Context, args []string) error {
	t, fs := c.env.CallFlags("atp booking create", atpUsage, projectHelp)
	file := fs.String("file", "", "JSON file of the booking (- for stdin); docs/catalogues/atp.md shows one")
	fixture := fs.Bool("fixture", false, "create the demo booking (a two-person ski week)")
	advance := fs.String("advance-to", "", "walk the new booking to PENDING_CONFIRMATION or CONFIRMED (PRE_JOURNEY)")
	pos, err := c.env.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return cli.Usagef("unexpected argument %q: pass the booking with --file FILE or --fixture", pos[0])
	}
	var booking json.RawMessage
	switch {
	case *fixture && *file != "":
		return cli.Usagef("pass --file or --fixture, not both")
	case *fixture:
		booking, _ = json.Marshal(atptools.FixtureBooking())
	case *file == "-":
		if err := json.NewDecoder(os.Stdin).Decode(&booking); err != nil {
			return cli.Usagef("--file -: stdin is not one JSON object: %v", err)
		}
	case *file != "":
		b, err := os.ReadFile(*file)
		if err != nil {
			return cli.Usagef("--file: %v", err)
		}
		if !json.Valid(b) {
			return cli.Usagef("--file %s is not valid JSON", *file)
		}
		booking = b
	default:
		return cli.Usagef("pass the booking with --file FILE (or - for stdin), or --fixture for the demo booking")
	}
	a := map[string]any{"booking": booking}
	if *advance != "" {
		a["advance_to"] = strings.ToUpper(*advance)
	}
	res, err := t.Call(ctx, atptools.ToolBookingCreate, a)
	if err != nil {
		return err
	}
	if t.JSON() {
		return c.env.PrintJSON(res)
	}
	var b struct {
		ID    string `json:"booking_object_id"`
		State string `json:"tool_state"`
	}
	_ = json.Unmarshal(res, &b)
	fmt.Fprintf(c.env.Stdout(), "booking %s created (state %s)\n", b.ID, b.State)
	return nil
}

func (c *atpCommand) get(ctx context.Context, args []string) error {
	t, fs := c.env.CallFlags("atp booking get", atpUsage, projectHelp)
	pos, err := c.env.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return cli.Usagef("want 'utpmesh atp booking get BOOKING_ID'")
	}
	res, err := t.Call(ctx, atptools.ToolBookingGet, map[string]string{"booking_object_id": pos[0]})
	if err != nil {
		return err
	}
	return c.env.PrintJSON(res)
}

func (c *atpCommand) transition(ctx context.Context, args []string) error {
	t, fs := c.env.CallFlags("atp booking transition", atpUsage, projectHelp)
	reason := fs.String("reason", "", "why (kept in the event log)")
	pos, err := c.env.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return cli.Usagef("want 'utpmesh atp booking transition BOOKING_ID STATE', e.g. STATE JOURNEY")
	}
	res, err := t.Call(ctx, atptools.ToolBookingTransition, map[string]string{"booking_object_id": pos[0], "to": pos[1], "reason": *reason})
	if err != nil {
		return err
	}
	if t.JSON() {
		return c.env.PrintJSON(res)
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
	fmt.Fprintf(c.env.Stdout(), "booking %s: %s -> %s\n", r.ID, r.Event.Data.FromTool, r.Event.Data.ToTool)
	return nil
}

func (c *atpCommand) events(ctx context.Context, args []string) error {
	t, fs := c.env.CallFlags("atp booking events", atpUsage, projectHelp)
	after := fs.Int("after", 0, "only events after this sequence number")
	limit := fs.Int("limit", 0, "at most this many events (0: all, up to 1000)")
	pos, err := c.env.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return cli.Usagef("want 'utpmesh atp booking events BOOKING_ID'")
	}
	if *after < 0 || *limit < 0 || *limit > 1000 {
		return cli.Usagef("--after must be ≥ 0 and --limit 0 to 1000")
	}
	a := map[string]any{"booking_object_id": pos[0], "after": *after}
	if *limit > 0 {
		a["limit"] = *limit
	}
	res, err := t.Call(ctx, atptools.ToolBookingEvents, a)
	if err != nil {
		return err
	}
	if t.JSON() {
		return c.env.PrintJSON(res)
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
	tw := tabwriter.NewWriter(c.env.Stdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tTYPE\tACTOR\tDATA")
	for _, e := range r.Events {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", e.Seq, e.Time, e.Type, e.Actor, cli.Cut(string(e.Data), 100))
	}
	return tw.Flush()
}

func (c *hemCommand) Run(ctx context.Context, args []string) error {
	return c.env.Dispatch(ctx, "hem", "Usage:\n"+hemUsage+"\n", []cli.Sub{
		{Names: []string{"ls", "list"}, Run: c.ls},
		{Names: []string{"confirm"}, Run: c.confirm},
		{Names: []string{"decline"}, Run: c.decline},
	}, args)
}

func (c *hemCommand) ls(ctx context.Context, args []string) error {
	t, fs := c.env.OperatorCallFlags("hem ls", hemUsage, projectHelp)
	status := fs.String("status", "", "PENDING, COMPLETE or DECLINED (default: all)")
	pos, err := c.env.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return cli.Usagef("unexpected argument %q ('utpmesh hem ls' takes flags only)", pos[0])
	}
	a := map[string]string{}
	if *status != "" {
		a["status"] = strings.ToUpper(*status)
	}
	res, err := t.Call(ctx, atptools.ToolHEMList, a)
	if err != nil {
		return err
	}
	if t.JSON() {
		return c.env.PrintJSON(res)
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
			Operator string `json:"operator"`
			Prompt   string `json:"confirmation_prompt"`
		} `json:"tasks"`
	}
	_ = json.Unmarshal(res, &r)
	tw := tabwriter.NewWriter(c.env.Stdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tHEM\tBOOKING\tSTATUS\tAGENT\tDEADLINE\tTOKEN\tDECIDED BY")
	for _, x := range r.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.TaskID, x.HEMID, orDash(x.Booking), x.Status, x.AgentID, x.Deadline, orDash(x.Token), orDash(x.Operator))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// The confirmation prompt of each pending task (the structured
	// escalation of a mandate gap).
	for _, x := range r.Tasks {
		if x.Status == "PENDING" && x.Prompt != "" {
			fmt.Fprintf(c.env.Stdout(), "\n%s: %s\n", x.TaskID, x.Prompt)
		}
	}
	return nil
}

func (c *hemCommand) confirm(ctx context.Context, args []string) error {
	t, fs := c.env.OperatorCallFlags("hem confirm", hemUsage, projectHelp)
	token := fs.String("token", "", "the task's human_confirmation_token (from 'utpmesh hem ls'), when its HEM needs one")
	note := fs.String("note", "", "a note kept with the decision")
	parent := fs.String("parent-mandate", "", "HEM-MANDATE-01: the mandate the agent's was narrowed from, a file or the token (e.g. utpmesh-data/demo-mandate.jwt)")
	pos, err := c.env.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return cli.Usagef("want 'utpmesh hem confirm TASK_ID' ('utpmesh hem ls' lists the tasks)")
	}
	a := map[string]string{"task_id": pos[0], "human_confirmation_token": *token, "note": *note}
	if *parent != "" {
		tok, err := readToken(*parent)
		if err != nil {
			return err
		}
		a["parent_mandate"] = tok
	}
	res, err := t.Call(ctx, atptools.ToolHEMConfirm, a)
	if err != nil {
		return err
	}
	return c.print(t, res)
}

func (c *hemCommand) decline(ctx context.Context, args []string) error {
	t, fs := c.env.OperatorCallFlags("hem decline", hemUsage, projectHelp)
	reason := fs.String("reason", "", "why (the agent reads it); required")
	pos, err := c.env.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return cli.Usagef("want 'utpmesh hem decline TASK_ID --reason R'")
	}
	if strings.TrimSpace(*reason) == "" {
		return cli.Usagef("--reason is required: the agent that escalated reads it")
	}
	res, err := t.Call(ctx, atptools.ToolHEMDecline, map[string]string{"task_id": pos[0], "reason": *reason})
	if err != nil {
		return err
	}
	return c.print(t, res)
}

func (c *hemCommand) print(t cli.Caller, res json.RawMessage) error {
	if t.JSON() {
		return c.env.PrintJSON(res)
	}
	var r map[string]any
	_ = json.Unmarshal(res, &r)
	fmt.Fprintf(c.env.Stdout(), "task %v: %v", r["task_id"], r["status"])
	if o, ok := r["hem_outcome"]; ok {
		fmt.Fprintf(c.env.Stdout(), " (%v, decision %v)", o, r["decision_object_id"])
	}
	if why, ok := r["reason"]; ok {
		fmt.Fprintf(c.env.Stdout(), " (%v)", why)
	}
	if op, ok := r["operator"]; ok {
		fmt.Fprintf(c.env.Stdout(), " by operator %v", op)
	}
	if jti, ok := r["mandate_jti"]; ok {
		fmt.Fprintf(c.env.Stdout(), "; sub-mandate %v issued (narrowed from %v), delivered to the agent's turn", jti, r["parent_mandate_jti"])
	}
	fmt.Fprintln(c.env.Stdout())
	return nil
}

// readToken reads a mandate given as a file or as the token itself.
func readToken(s string) (string, error) {
	if b, err := os.ReadFile(strings.TrimPrefix(s, "@")); err == nil {
		return strings.TrimSpace(string(b)), nil
	} else if strings.HasPrefix(s, "@") || !strings.Contains(s, ".") || strings.ContainsAny(s, "/\\") {
		return "", cli.Usagef("--parent-mandate %s: %v (pass a file holding the mandate, or the token)", s, err)
	}
	return strings.TrimSpace(s), nil
}

// orDash is s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
