package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// ToolConfig is what RunTool needs.
type ToolConfig struct {
	// Agent is the kit's agent client: its calls go through the mesh's
	// admission with its mandate, which must permit Tool and
	// cancel_tool_call. Required.
	Agent *agent.Client
	// Conn is the agent's connection (discovery when Admin is nil). Required.
	Conn *nats.Conn
	// Admin is a connection with the admin identity: it publishes the
	// commands the mesh did not admit and writes their cards. Nil: the
	// cases that need it fail saying so.
	Admin *nats.Conn
	// Tool is the probe tool's name; default DefaultTool.
	Tool string
	// Process is the implementation when the kit started it (--exec):
	// it is restarted after the crash case and killed in the sigkill
	// case. Nil: another instance must take the crashed call over, and
	// the sigkill case is skipped.
	Process *Process
	// Wait bounds each case and the wait for the tool to be ready;
	// default 90 s.
	Wait time.Duration
	// Only runs just the named cases (nil: all).
	Only []string
}

// toolCase is one case of RunTool.
type toolCase struct {
	name, section string
	run           func(k *toolKit, ctx context.Context) (Outcome, string)
}

// ToolCases names the cases of RunTool in the order they run, each with
// the protocol.md section it proves.
func ToolCases() [][2]string {
	out := make([][2]string, 0, len(toolCases))
	for _, c := range toolCases {
		out = append(out, [2]string{c.name, c.section})
	}
	return out
}

var toolCases = []toolCase{
	{"success", "§5.2", (*toolKit).success},
	{"tool_failure", "§13", (*toolKit).toolFailure},
	{"inline_arguments", "§7.1", (*toolKit).inlineArguments},
	{"missing_card", "§7.1", (*toolKit).missingCard},
	{"unauthorized", "§5.7", (*toolKit).unauthorized},
	{"timeout", "§7.5", (*toolKit).timeout},
	{"cancel", "§7.6", (*toolKit).cancel},
	{"redelivery", "§7.4", (*toolKit).redelivery},
	{"sigkill", "§7.4", (*toolKit).sigkill},
	{"discovery", "§2.7", (*toolKit).discovery},
}

type toolKit struct {
	cfg     ToolConfig
	ver     string
	project string
	channel string
	turn    string
	markers string
	entry   *registry.Entry
	target  string
}

// RunTool waits until the probe tool is registered in the agent's project
// and answers discovery, then runs the cases one after the other and
// returns their results. The error is for a kit that could not run at all
// (ErrConfig, ErrNotReady).
func RunTool(ctx context.Context, cfg ToolConfig) ([]Result, error) {
	if cfg.Agent == nil || cfg.Conn == nil {
		return nil, fmt.Errorf("%w: an agent client and its connection are required", ErrConfig)
	}
	if cfg.Tool == "" {
		cfg.Tool = DefaultTool
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 90 * time.Second
	}
	for _, n := range cfg.Only {
		known := false
		for _, c := range toolCases {
			known = known || c.name == n
		}
		if !known {
			names := make([]string, len(toolCases))
			for i, c := range toolCases {
				names[i] = c.name
			}
			return nil, fmt.Errorf("%w: no case %q; the cases are %s", ErrConfig, n, strings.Join(names, ", "))
		}
	}
	dir, err := os.MkdirTemp("", "utpmesh-conformance-")
	if err != nil {
		return nil, fmt.Errorf("conformance: marker directory: %w", err)
	}
	defer os.RemoveAll(dir)
	k := &toolKit{cfg: cfg, ver: cfg.Agent.Version(), project: cfg.Agent.Project(), channel: cfg.Agent.Channel(),
		turn: "conformance-" + card.NewID(), markers: dir}
	if err := k.ready(ctx); err != nil {
		return nil, err
	}
	var out []Result
	for _, c := range toolCases {
		if len(cfg.Only) > 0 && !contains(cfg.Only, c.name) {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, cfg.Wait)
		begin := time.Now()
		o, d := c.run(k, cctx)
		cancel()
		out = append(out, Result{Case: c.name, Section: c.section, Outcome: o, Detail: d, DurationNS: time.Since(begin)})
		if ctx.Err() != nil {
			break
		}
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// ready waits until the tool is registered and a worker serving it
// answers discovery.
func (k *toolKit) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, k.cfg.Wait)
	defer cancel()
	var last error
	for {
		e, err := k.cfg.Agent.Registry().Get(ctx, k.project, k.cfg.Tool)
		if err == nil {
			var eps []endpoint
			if eps, err = k.endpoints(ctx); err == nil && len(eps) == 0 {
				err = fmt.Errorf("no worker answers $SRV.INFO.utpmesh-worker with an endpoint for %s", k.cfg.Tool)
			}
		} else {
			err = fmt.Errorf("%s is not registered in project %s: %w", k.cfg.Tool, k.project, err)
		}
		if err == nil {
			tmpl, terr := subjects.ParseTemplate(e.TargetSubject)
			if terr != nil {
				return fmt.Errorf("%w: the entry's target_subject %q: %v", ErrNotReady, e.TargetSubject, terr)
			}
			s, terr := tmpl.Render(k.ver, k.project, k.channel)
			if terr != nil {
				return fmt.Errorf("%w: the entry's target_subject %q: %v", ErrNotReady, e.TargetSubject, terr)
			}
			k.entry, k.target = e, s.String()
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w after %v: %v (start the implementation with the worker identity of the tool, and check it registers %s in project %s)",
				ErrNotReady, k.cfg.Wait, last, k.cfg.Tool, k.project)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// timeoutOf is the tool's registered timeout.
func (k *toolKit) timeoutOf() time.Duration {
	if k.entry.Options.TimeoutSeconds > 0 {
		return time.Duration(k.entry.Options.TimeoutSeconds * float64(time.Second))
	}
	return registry.DefaultTimeout
}

// marker is a fresh marker file path for a case.
func (k *toolKit) marker(name string) string {
	return filepath.Join(k.markers, name+"-"+card.NewID())
}

// call makes one admitted call of the probe and waits for its result.
func (k *toolKit) call(ctx context.Context, id string, args ProbeArgs) (*agent.Outcome, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	return k.cfg.Agent.Call(ctx, agent.CallRequest{ToolName: k.cfg.Tool, Arguments: raw, AgentTurnID: k.turn, ToolCallID: id})
}

// describe says what a result is, for details.
func describe(r *card.ToolResultContent) string {
	if r == nil {
		return "no result"
	}
	if r.Error != nil {
		return fmt.Sprintf("%s %s %q", r.Status, r.Error.Code, r.Error.Message)
	}
	return fmt.Sprintf("%s %s", r.Status, string(r.Result))
}

// expectFailure checks a result's status and error code.
func expectFailure(r *card.ToolResultContent, status card.Status, code card.ErrorCode) (Outcome, string) {
	if r.Status != status || r.Error == nil || r.Error.Code != code {
		return failf("got %s, want %s %s", describe(r), status, code)
	}
	return passf("%s %s: %s", r.Status, r.Error.Code, r.Error.Message)
}

func (k *toolKit) success(ctx context.Context) (Outcome, string) {
	value := json.RawMessage(`{"n":42,"text":"héllo ✓","list":[1,"two",null]}`)
	out, err := k.call(ctx, card.NewID(), ProbeArgs{Mode: ModeEcho, Value: value})
	if err != nil {
		return failf("call: %v", err)
	}
	if out.Result.Status != card.StatusSuccess || !jsonEqual(out.Result.Result, value) {
		return failf("got %s, want success with the echoed value %s", describe(out.Result), value)
	}
	return passf("success, the value echoed from the tool.call card's arguments")
}

func (k *toolKit) toolFailure(ctx context.Context) (Outcome, string) {
	const msg = "the probe fails on purpose"
	out, err := k.call(ctx, card.NewID(), ProbeArgs{Mode: ModeFail, Code: string(card.CodeUpstreamUnavailable), Message: msg})
	if err != nil {
		return failf("call: %v", err)
	}
	o, d := expectFailure(out.Result, card.StatusFailed, card.CodeUpstreamUnavailable)
	if o == Pass && out.Result.Error.Message != msg {
		return failf("error message %q, want the handler's %q", out.Result.Error.Message, msg)
	}
	return o, d
}

func (k *toolKit) timeout(ctx context.Context) (Outcome, string) {
	to := k.timeoutOf()
	out, err := k.call(ctx, card.NewID(), ProbeArgs{Mode: ModeSleep, MS: (to + 30*time.Second).Milliseconds()})
	if err != nil {
		return failf("call: %v", err)
	}
	o, d := expectFailure(out.Result, card.StatusTimeout, card.CodeToolTimeout)
	if o == Pass {
		d = fmt.Sprintf("after the entry's timeout of %v: %s", to, d)
	}
	return o, d
}

// waitMarker waits until the marker file has at least n lines.
func waitMarker(ctx context.Context, path string, n int) error {
	for markerLines(path) < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the handler never ran (marker %s has %d of %d lines): %w", path, markerLines(path), n, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

type callResult struct {
	out *agent.Outcome
	err error
}

// callAsync makes a call in the background.
func (k *toolKit) callAsync(ctx context.Context, id string, args ProbeArgs) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		out, err := k.call(ctx, id, args)
		ch <- callResult{out, err}
	}()
	return ch
}

func (k *toolKit) cancel(ctx context.Context) (Outcome, string) {
	id, marker := card.NewID(), k.marker("cancel")
	done := k.callAsync(ctx, id, ProbeArgs{Mode: ModeSleep, MS: (k.timeoutOf() + 30*time.Second).Milliseconds(), Marker: marker})
	if err := waitMarker(ctx, marker, 1); err != nil {
		return failf("%v", err)
	}
	args, _ := json.Marshal(map[string]string{"tool_call_id": id, "agent_turn_id": k.turn, "reason": "conformance kit"})
	co, err := k.cfg.Agent.Call(ctx, agent.CallRequest{ToolName: "cancel_tool_call", Arguments: args, AgentTurnID: k.turn})
	if err != nil {
		return failf("cancel_tool_call: %v", err)
	}
	if co.Result.Status != card.StatusSuccess {
		return failf("cancel_tool_call ended %s (its mandate must permit cancel_tool_call)", describe(co.Result))
	}
	r := <-done
	if r.err != nil {
		return failf("call: %v", r.err)
	}
	return expectFailure(r.out.Result, card.StatusCanceled, card.CodeCanceled)
}

func (k *toolKit) redelivery(ctx context.Context) (Outcome, string) {
	marker := k.marker("redelivery")
	value := json.RawMessage(`"survived"`)
	out, err := k.call(ctx, card.NewID(), ProbeArgs{Mode: ModeCrash, Value: value, Marker: marker})
	if err != nil {
		hint := ""
		if k.cfg.Process == nil {
			hint = " (the probe exits on the call's first execution: run a second instance, or let the kit restart it with --exec)"
		}
		return failf("call: %v%s", err, hint)
	}
	if out.Result.Status != card.StatusSuccess || !jsonEqual(out.Result.Result, value) {
		return failf("got %s, want success %s once the redelivered command ran again", describe(out.Result), value)
	}
	if n := markerLines(marker); n != 2 {
		return failf("the handler ran %d times, want 2 (the crashed execution and the redelivered one)", n)
	}
	if d := k.oneResult(ctx, out); d != "" {
		return failf("%s", d)
	}
	return passf("the process exited mid-call; the command was redelivered, ran again and ended success with one result")
}

func (k *toolKit) sigkill(ctx context.Context) (Outcome, string) {
	if k.cfg.Process == nil {
		return Skip, "needs the kit to run the implementation (--exec CMD)"
	}
	marker := k.marker("sigkill")
	value := json.RawMessage(`"after the kill"`)
	ms := min(2*time.Second, k.timeoutOf()/2).Milliseconds()
	done := k.callAsync(ctx, card.NewID(), ProbeArgs{Mode: ModeSleep, MS: ms, Value: value, Marker: marker})
	if err := waitMarker(ctx, marker, 1); err != nil {
		return failf("%v", err)
	}
	if err := k.cfg.Process.Kill(ctx); err != nil {
		return failf("%v", err)
	}
	r := <-done
	if r.err != nil {
		return failf("call: %v", r.err)
	}
	if r.out.Result.Status != card.StatusSuccess || !jsonEqual(r.out.Result.Result, value) {
		return failf("got %s, want success %s from the restarted implementation", describe(r.out.Result), value)
	}
	if n := markerLines(marker); n != 2 {
		return failf("the handler ran %d times, want 2 (the killed execution and the taken-over one)", n)
	}
	if d := k.oneResult(ctx, r.out); d != "" {
		return failf("%s", d)
	}
	return passf("SIGKILL mid-call; the restarted process took the call over and ended it success with one result")
}

// oneResult checks, from the turn as the mesh keeps it, that the call has
// one result, the one the agent got; it returns what is wrong, or "".
func (k *toolKit) oneResult(ctx context.Context, out *agent.Outcome) string {
	ts, err := k.cfg.Agent.Resume(ctx, k.turn)
	if err != nil {
		return fmt.Sprintf("resume the turn: %v", err)
	}
	n := 0
	for _, c := range ts.Calls {
		if c.ToolCallID != out.Call.ToolCallID {
			continue
		}
		n++
		if c.ResultCard == nil || c.ResultCard.CardID != out.ResultCard.CardID {
			return fmt.Sprintf("the turn holds another result for the call than the one its wakeup named (%s)", out.ResultCard.CardID)
		}
	}
	if n != 1 {
		return fmt.Sprintf("the turn lists the call %d times, want once", n)
	}
	return ""
}

// errNoAdmin is the detail of the cases that need the admin connection.
const errNoAdmin = "needs the admin identity to publish a command the mesh did not admit (--admin-creds FILE, e.g. DATA/creds/admin.nk)"

// unadmitted publishes a command the mesh did not admit, as admin, and
// returns the call's result. body edits the command's JSON object; put
// says whether the tool.call card is written first.
func (k *toolKit) unadmitted(ctx context.Context, args ProbeArgs, put bool, body func(map[string]any)) (*card.ToolResultContent, error) {
	if k.cfg.Admin == nil {
		return nil, errors.New(errNoAdmin)
	}
	st, err := natsstore.NewClient(k.cfg.Admin)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(k.cfg.Admin)
	if err != nil {
		return nil, err
	}
	agentID := k.cfg.Agent.AgentID()
	wake, err := subjects.AgentWakeup(k.ver, k.project, k.channel, agentID)
	if err != nil {
		return nil, err
	}
	id := card.NewID()
	wakes := make(chan *nats.Msg, 64)
	sub, err := k.cfg.Admin.ChanSubscribe(wake.String(), wakes)
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", wake, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := k.cfg.Admin.FlushWithContext(ctx); err != nil {
		return nil, err
	}
	rawArgs, _ := json.Marshal(args)
	content, _ := json.Marshal(card.ToolCallContent{ToolName: k.cfg.Tool, Arguments: rawArgs, TargetSubject: k.target})
	cc := &card.Card{CardID: card.NewID(), ProjectID: k.project, Type: card.TypeToolCall, AuthorID: agentID, Content: content, ToolCallID: id,
		CreatedAt: time.Now().UTC(), Metadata: card.Metadata{AgentID: agentID, AgentTurnID: k.turn, StepID: card.NewID(), ToolCallID: id}}
	if put {
		if err := st.Put(ctx, cc); err != nil {
			return nil, fmt.Errorf("write the tool.call card: %w", err)
		}
	}
	cmd, _ := json.Marshal(utp.Command{AgentID: agentID, AgentTurnID: k.turn, ToolCallID: id, AfterExecution: card.Suspend,
		ToolCallCardID: cc.CardID, StepID: cc.Metadata.StepID, ToolName: k.cfg.Tool})
	var obj map[string]any
	_ = json.Unmarshal(cmd, &obj)
	if body != nil {
		body(obj)
	}
	data, _ := json.Marshal(obj)
	if _, err := js.Publish(ctx, k.target, data); err != nil {
		return nil, fmt.Errorf("publish the command on %s: %w", k.target, err)
	}
	for {
		select {
		case m := <-wakes:
			var wk utp.Wakeup
			if json.Unmarshal(m.Data, &wk) != nil || wk.ToolCallID != id {
				continue
			}
			rc, err := st.Get(ctx, k.project, wk.ToolResultCardID)
			if err != nil {
				return nil, fmt.Errorf("read the result card %s: %w", wk.ToolResultCardID, err)
			}
			return rc.ToolResult()
		case <-ctx.Done():
			return nil, fmt.Errorf("no result and no wakeup for the command (a dead letter, or nobody answered): %w", ctx.Err())
		}
	}
}

// refused runs an unadmitted command and checks it ended failed with
// code without running the handler.
func (k *toolKit) refused(ctx context.Context, name string, code card.ErrorCode, put bool, body func(map[string]any)) (Outcome, string) {
	marker := k.marker(name)
	r, err := k.unadmitted(ctx, ProbeArgs{Mode: ModeEcho, Marker: marker}, put, body)
	if err != nil {
		return failf("%v", err)
	}
	o, d := expectFailure(r, card.StatusFailed, code)
	if n := markerLines(marker); n != 0 {
		return failf("the handler ran (%d times); %s", n, d)
	}
	if o == Pass {
		d += " (not executed)"
	}
	return o, d
}

func (k *toolKit) inlineArguments(ctx context.Context) (Outcome, string) {
	return k.refused(ctx, "inline", card.CodeBadRequest, true, func(m map[string]any) {
		m["arguments"] = map[string]any{"mode": ModeEcho}
	})
}

func (k *toolKit) missingCard(ctx context.Context) (Outcome, string) {
	return k.refused(ctx, "missing", card.CodeBadRequest, false, nil)
}

func (k *toolKit) unauthorized(ctx context.Context) (Outcome, string) {
	return k.refused(ctx, "unadmitted", card.CodeAuthFailed, true, nil)
}
