package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// AgentRequest is what the kit writes to an agent program's stdin: one
// turn's calls, to be made together (all dispatched before any result is
// awaited).
type AgentRequest struct {
	// AgentTurnID is the turn; a re-run with the same request resumes it.
	AgentTurnID string `json:"agent_turn_id"`
	// WaitMS is how long the program waits for the results before it
	// prints the calls still without one as pending and exits.
	WaitMS int64 `json:"wait_ms"`
	// Calls are the calls to make, each with its own tool_call_id.
	Calls []AgentCall `json:"calls"`
}

// AgentCall is one call of an AgentRequest.
type AgentCall struct {
	ToolCallID string          `json:"tool_call_id"`
	ToolName   string          `json:"tool_name"`
	Arguments  json.RawMessage `json:"arguments"`
}

// AgentLine is one line an agent program prints on stdout per call: its
// result, or status "pending" when it had none within wait_ms.
type AgentLine struct {
	ToolCallID string          `json:"tool_call_id"`
	Status     string          `json:"status"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *card.Error     `json:"error,omitempty"`
}

// StatusPending is the status of a call without a result within wait_ms.
const StatusPending = "pending"

// AgentConfig is what RunAgent needs.
type AgentConfig struct {
	// Command runs the agent program (`sh -c`). Required.
	Command string
	// Tool is the probe tool the program calls; default DefaultTool. The
	// caller serves it.
	Tool string
	// Stderr gets the program's stderr; nil discards it.
	Stderr io.Writer
	// Wait bounds each case; default 90 s.
	Wait time.Duration
	// Only runs just the named cases (nil: all).
	Only []string
}

type agentKit struct {
	cfg     AgentConfig
	markers string
	// pendingReq is the request the pending case left unfinished, which
	// the resume case completes.
	pendingReq *AgentRequest
}

var agentCases = []struct {
	name, section string
	run           func(k *agentKit, ctx context.Context) (Outcome, string)
}{
	{"results", "§5.2", (*agentKit).results},
	{"parallel", "§8.2", (*agentKit).parallel},
	{"pending", "§5.3", (*agentKit).pending},
	{"resume", "§5.3", (*agentKit).resume},
	{"restart", "§5.3", (*agentKit).restart},
}

// AgentCases names the cases of RunAgent in the order they run, each
// with the protocol.md section it proves.
func AgentCases() [][2]string {
	out := make([][2]string, 0, len(agentCases))
	for _, c := range agentCases {
		out = append(out, [2]string{c.name, c.section})
	}
	return out
}

// RunAgent runs the agent program through the agent cases and returns
// their results; the probe tool must be served (the CLI serves the Go
// probe). The error is for a kit that could not run at all (ErrConfig).
func RunAgent(ctx context.Context, cfg AgentConfig) ([]Result, error) {
	if strings.TrimSpace(cfg.Command) == "" {
		return nil, fmt.Errorf("%w: the agent program's command is required (--exec CMD)", ErrConfig)
	}
	if cfg.Tool == "" {
		cfg.Tool = DefaultTool
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 90 * time.Second
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	names := make([]string, len(agentCases))
	for i, c := range agentCases {
		names[i] = c.name
	}
	for _, n := range cfg.Only {
		if !contains(names, n) {
			return nil, fmt.Errorf("%w: no case %q; the cases are %s", ErrConfig, n, strings.Join(names, ", "))
		}
	}
	dir, err := os.MkdirTemp("", "utpmesh-conformance-agent-")
	if err != nil {
		return nil, fmt.Errorf("conformance: marker directory: %w", err)
	}
	defer os.RemoveAll(dir)
	k := &agentKit{cfg: cfg, markers: dir}
	var out []Result
	for _, c := range agentCases {
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

// agentRun is one run of the agent program.
type agentRun struct {
	cmd    *exec.Cmd
	lines  chan AgentLine
	bad    chan string
	exited chan error
}

// start runs the program with req on its stdin.
func (k *agentKit) start(req *AgentRequest) (*agentRun, error) {
	in, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("sh", "-c", k.cfg.Command)
	cmd.Stdin = bytes.NewReader(append(in, '\n'))
	cmd.Stderr = k.cfg.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the agent program %q: %w", k.cfg.Command, err)
	}
	r := &agentRun{cmd: cmd, lines: make(chan AgentLine, len(req.Calls)+16), bad: make(chan string, 16), exited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			text := strings.TrimSpace(sc.Text())
			if text == "" {
				continue
			}
			var l AgentLine
			if err := json.Unmarshal([]byte(text), &l); err != nil || l.ToolCallID == "" || l.Status == "" {
				select {
				case r.bad <- text:
				default:
				}
				continue
			}
			r.lines <- l
		}
		r.exited <- cmd.Wait()
		close(r.lines)
	}()
	return r, nil
}

// kill SIGKILLs the program's process group.
func (r *agentRun) kill() {
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	for range r.lines { // drain until the reader is done
	}
	<-r.exited
}

// run runs the program to its end and returns its lines by tool_call_id.
func (k *agentKit) run(ctx context.Context, req *AgentRequest) (map[string]AgentLine, error) {
	r, err := k.start(req)
	if err != nil {
		return nil, err
	}
	got := map[string]AgentLine{}
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				if err := <-r.exited; err != nil {
					return got, fmt.Errorf("the agent program exited with %v, want 0", err)
				}
				select {
				case b := <-r.bad:
					return got, fmt.Errorf("the agent program printed %q, which is not a result line {\"tool_call_id\",\"status\",…}", cutText(b, 120))
				default:
				}
				return got, nil
			}
			if _, dup := got[l.ToolCallID]; dup {
				return got, fmt.Errorf("the agent program printed two lines for call %s", l.ToolCallID)
			}
			got[l.ToolCallID] = l
		case <-ctx.Done():
			r.kill()
			return got, fmt.Errorf("the agent program did not finish: %w", ctx.Err())
		}
	}
}

func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// request builds a request of one fresh turn.
func (k *agentKit) request(waitMS int64, args ...ProbeArgs) *AgentRequest {
	req := &AgentRequest{AgentTurnID: "conformance-agent-" + card.NewID(), WaitMS: waitMS}
	for _, a := range args {
		raw, _ := json.Marshal(a)
		req.Calls = append(req.Calls, AgentCall{ToolCallID: card.NewID(), ToolName: k.cfg.Tool, Arguments: raw})
	}
	return req
}

// expectLine checks one call's line.
func expectLine(got map[string]AgentLine, id, status string, value json.RawMessage, code card.ErrorCode) string {
	l, ok := got[id]
	switch {
	case !ok:
		return fmt.Sprintf("no line for call %s", id)
	case l.Status != status:
		return fmt.Sprintf("call %s: status %q, want %q", id, l.Status, status)
	case value != nil && !jsonEqual(l.Result, value):
		return fmt.Sprintf("call %s: result %s, want %s", id, l.Result, value)
	case code != "" && (l.Error == nil || l.Error.Code != code):
		return fmt.Sprintf("call %s: error %+v, want code %s", id, l.Error, code)
	}
	return ""
}

func (k *agentKit) results(ctx context.Context) (Outcome, string) {
	value := json.RawMessage(`{"n":7,"text":"héllo ✓"}`)
	req := k.request(k.cfg.Wait.Milliseconds()/2, ProbeArgs{Mode: ModeEcho, Value: value},
		ProbeArgs{Mode: ModeFail, Code: string(card.CodeUpstreamUnavailable), Message: "the probe fails on purpose"})
	got, err := k.run(ctx, req)
	if err != nil {
		return failf("%v", err)
	}
	if d := expectLine(got, req.Calls[0].ToolCallID, string(card.StatusSuccess), value, ""); d != "" {
		return failf("%s", d)
	}
	if d := expectLine(got, req.Calls[1].ToolCallID, string(card.StatusFailed), nil, card.CodeUpstreamUnavailable); d != "" {
		return failf("%s", d)
	}
	return passf("a success with its value and a failure with its code, read from the result cards")
}

func (k *agentKit) parallel(ctx context.Context) (Outcome, string) {
	var args []ProbeArgs
	var markers []string
	for i := range 3 {
		m := k.marker(fmt.Sprintf("parallel-%d", i))
		markers = append(markers, m)
		args = append(args, ProbeArgs{Mode: ModeSleep, MS: 300, Value: json.RawMessage(fmt.Sprint(i)), Marker: m})
	}
	req := k.request(k.cfg.Wait.Milliseconds()/2, args...)
	got, err := k.run(ctx, req)
	if err != nil {
		return failf("%v", err)
	}
	for i, c := range req.Calls {
		if d := expectLine(got, c.ToolCallID, string(card.StatusSuccess), json.RawMessage(fmt.Sprint(i)), ""); d != "" {
			return failf("%s", d)
		}
		if n := markerLines(markers[i]); n != 1 {
			return failf("call %s ran %d times, want once", c.ToolCallID, n)
		}
	}
	return passf("3 calls of one turn, each woken with its own result, each run once")
}

func (k *agentKit) marker(name string) string {
	return k.markers + "/" + name + "-" + card.NewID()
}

func (k *agentKit) pending(ctx context.Context) (Outcome, string) {
	m := k.marker("pending")
	req := k.request(1000, ProbeArgs{Mode: ModeSleep, MS: 4000, Value: json.RawMessage(`"late"`), Marker: m})
	got, err := k.run(ctx, req)
	if err != nil {
		return failf("%v", err)
	}
	if d := expectLine(got, req.Calls[0].ToolCallID, StatusPending, nil, ""); d != "" {
		return failf("%s (a call of 4 s awaited for 1 s)", d)
	}
	k.pendingReq = req
	return passf("a call without a result within wait_ms printed pending; the program exited 0")
}

func (k *agentKit) resume(ctx context.Context) (Outcome, string) {
	if k.pendingReq == nil {
		return Skip, "needs the pending case"
	}
	req := *k.pendingReq
	req.WaitMS = k.cfg.Wait.Milliseconds() / 2
	got, err := k.run(ctx, &req)
	if err != nil {
		return failf("%v", err)
	}
	if d := expectLine(got, req.Calls[0].ToolCallID, string(card.StatusSuccess), json.RawMessage(`"late"`), ""); d != "" {
		return failf("%s", d)
	}
	var a ProbeArgs
	_ = json.Unmarshal(req.Calls[0].Arguments, &a)
	if n := markerLines(a.Marker); n != 1 {
		return failf("the call ran %d times, want once: a re-run must find the call, not make a new one", n)
	}
	return passf("the re-run with the same turn found the pending call's result; the call ran once")
}

func (k *agentKit) restart(ctx context.Context) (Outcome, string) {
	m := k.marker("restart")
	req := k.request(k.cfg.Wait.Milliseconds()/2, ProbeArgs{Mode: ModeSleep, MS: 1500, Value: json.RawMessage(`"kept"`), Marker: m})
	r, err := k.start(req)
	if err != nil {
		return failf("%v", err)
	}
	if err := waitMarker(ctx, m, 1); err != nil {
		r.kill()
		return failf("%v", err)
	}
	r.kill()
	got, err := k.run(ctx, req)
	if err != nil {
		return failf("after SIGKILL, the re-run: %v", err)
	}
	if d := expectLine(got, req.Calls[0].ToolCallID, string(card.StatusSuccess), json.RawMessage(`"kept"`), ""); d != "" {
		return failf("%s", d)
	}
	if n := markerLines(m); n != 1 {
		return failf("the call ran %d times, want once", n)
	}
	return passf("SIGKILL while awaiting; the re-run with the same turn got the result; the call ran once")
}
