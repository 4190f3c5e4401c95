package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/telemetry"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// recorder is a worker.Observer that counts events.
type recorder struct {
	mu        sync.Mutex
	started   map[string]int
	finished  map[string]int
	completed []string // tool/status/code
	redeliv   map[string]int
	takeovers map[string]int
	dead      map[string]int
	poisoned  map[string]int
}

func newRecorder() *recorder {
	return &recorder{started: map[string]int{}, finished: map[string]int{}, redeliv: map[string]int{},
		takeovers: map[string]int{}, dead: map[string]int{}, poisoned: map[string]int{}}
}

func (r *recorder) ExecuteStarted(tool string) { r.mu.Lock(); r.started[tool]++; r.mu.Unlock() }
func (r *recorder) ExecuteFinished(tool string, _ time.Duration) {
	r.mu.Lock()
	r.finished[tool]++
	r.mu.Unlock()
}
func (r *recorder) Completed(tool string, s card.Status, c card.ErrorCode, _ time.Duration) {
	r.mu.Lock()
	r.completed = append(r.completed, tool+"/"+string(s)+"/"+string(c))
	r.mu.Unlock()
}
func (r *recorder) Redelivered(tool string)    { r.mu.Lock(); r.redeliv[tool]++; r.mu.Unlock() }
func (r *recorder) ClaimTakenOver(tool string) { r.mu.Lock(); r.takeovers[tool]++; r.mu.Unlock() }
func (r *recorder) DeadLettered(tool string)   { r.mu.Lock(); r.dead[tool]++; r.mu.Unlock() }
func (r *recorder) Poisoned(tool string)       { r.mu.Lock(); r.poisoned[tool]++; r.mu.Unlock() }

func (r *recorder) snapshot() (completed []string, started, finished, dead map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cp := func(m map[string]int) map[string]int {
		out := map[string]int{}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	return append([]string(nil), r.completed...), cp(r.started), cp(r.finished), cp(r.dead)
}

func failing() worker.Tool {
	return worker.Tool{Name: "failing", Handler: func(context.Context, *worker.Call) (worker.Result, error) {
		return worker.Result{}, worker.Fail(card.CodeUpstreamUnavailable, "upstream down")
	}}
}

func TestObserverAndStats(t *testing.T) {
	rec := newRecorder()
	h := newHarness(t, worker.Config{Observer: rec}, echo.Tool(), failing())
	cases := []struct {
		tool, args string
		want       string
	}{
		{"echo", `{"a":1}`, "echo/success/"},
		{"failing", `{}`, "failing/failed/upstream_unavailable"},
		{"echo", `{"sleep_ms":-1}`, "echo/failed/bad_request"}, // schema: never executed
	}
	for _, tc := range cases {
		c := h.writeCall(tc.tool, tc.args)
		h.publish(toolSubject(tc.tool), c.command(tc.tool), nil)
		h.awaitReport(c.id)
	}
	// A PMO command naming no built-in is dead-lettered under "" (bounded labels).
	h.publish(pmoSubject("no_such_builtin"), map[string]any{"agent_id": agentID}, nil)
	h.awaitDeadLetter()

	completed, started, finished, dead := rec.snapshot()
	for _, tc := range cases {
		found := false
		for _, c := range completed {
			found = found || c == tc.want
		}
		if !found {
			t.Errorf("Completed events %v lack %s", completed, tc.want)
		}
	}
	if started["echo"] != 1 || finished["echo"] != 1 || started["failing"] != 1 || finished["failing"] != 1 {
		t.Errorf("execute events started=%v finished=%v, want one per executed call (the bad_request one never runs)", started, finished)
	}
	if dead[""] != 1 {
		t.Errorf("dead letters = %v, want one under \"\"", dead)
	}
	st := h.rt.Stats()
	if got := st["echo"]; got.Calls != 2 || got.Failed != 1 || got.InFlight != 0 {
		t.Errorf("echo stats = %+v, want 2 calls, 1 failed, none in flight", got)
	}
	if got := st["failing"]; got.Calls != 1 || got.Failed != 1 {
		t.Errorf("failing stats = %+v", got)
	}
	if _, ok := st["list_tools"]; !ok {
		t.Errorf("stats lack the built-ins: %v", st)
	}
}

func TestDiscoveryService(t *testing.T) {
	h := newHarness(t, worker.Config{ServiceVersion: "1.2.3-test", InstanceID: "inst-1"}, echo.Tool())
	c := h.writeCall("echo", `{}`)
	h.publish(toolSubject("echo"), c.command("echo"), nil)
	h.awaitReport(c.id)

	infoSubj, _ := micro.ControlSubject(micro.InfoVerb, worker.ServiceName, "")
	msg, err := h.nc.Request(infoSubj, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Name != worker.ServiceName || info.Version != "1.2.3-test" || info.Metadata["instance"] != "inst-1" ||
		info.Metadata["protocol_version"] != ver || info.Metadata["projects"] != project {
		t.Fatalf("info = %+v", info)
	}
	eps := map[string]micro.EndpointInfo{}
	for _, e := range info.Endpoints {
		eps[e.Name] = e
	}
	tests := []struct{ name, consumer, filter string }{
		{"echo", "utp_tool_echo", "cg." + ver + ".*.*.cmd.tool.echo"},
		{"list_tools", "utp_pmo", "cg." + ver + ".*.*.cmd.sys.pmo.internal.*"},
		{"cancel_tool_call", "utp_pmo", "cg." + ver + ".*.*.cmd.sys.pmo.internal.*"},
	}
	for _, tc := range tests {
		e, ok := eps[tc.name]
		if !ok {
			t.Errorf("no endpoint %s in %v", tc.name, info.Endpoints)
			continue
		}
		if e.Metadata["tool"] != tc.name || e.Metadata["consumer"] != tc.consumer || e.Metadata["filter_subject"] != tc.filter {
			t.Errorf("endpoint %s metadata = %v", tc.name, e.Metadata)
		}
		if e.Subject != "cg."+ver+".*.*.svc.worker."+tc.name {
			t.Errorf("endpoint %s subject = %s", tc.name, e.Subject)
		}
	}

	statsSubj, _ := micro.ControlSubject(micro.StatsVerb, worker.ServiceName, "")
	msg, err = h.nc.Request(statsSubj, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var stats micro.Stats
	if err := json.Unmarshal(msg.Data, &stats); err != nil {
		t.Fatal(err)
	}
	for _, e := range stats.Endpoints {
		if e.Name != "echo" {
			continue
		}
		var d worker.ToolStats
		if err := json.Unmarshal(e.Data, &d); err != nil || d.Calls != 1 || d.Failed != 0 {
			t.Errorf("echo STATS data = %s (%v), want calls 1", e.Data, err)
		}
	}

	// describe: the registry entry in the subject's project, or not_found.
	reply, err := h.nc.Request("cg."+ver+"."+project+".main.svc.worker.echo", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var d worker.DescribeReply
	if err := json.Unmarshal(reply.Data, &d); err != nil || d.Entry == nil || d.Entry.ToolName != "echo" || d.Instance != "inst-1" {
		t.Fatalf("describe = %s (%v)", reply.Data, err)
	}
	reply, err = h.nc.Request("cg."+ver+".otherproj.main.svc.worker.echo", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Header.Get("Svc-Error-Code") != "not_found" || !strings.Contains(string(reply.Data), `"not_found"`) {
		t.Fatalf("describe in an unregistered project = %v %s", reply.Header, reply.Data)
	}

	// Stop unregisters the service.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.rt.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	pingSubj, _ := micro.ControlSubject(micro.PingVerb, worker.ServiceName, "")
	if _, err := h.nc.Request(pingSubj, nil, 2*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("PING after Stop: %v, want no responders", err)
	}
}

func TestEndpointName(t *testing.T) {
	tests := []struct{ tool, want string }{
		{"echo", "echo"},
		{"web-search_2", "web-search_2"},
		{"artifact.put", "artifact_put_"}, // prefix; a hash follows
	}
	for _, tc := range tests {
		got := worker.EndpointName(tc.tool)
		if !strings.HasPrefix(got, tc.want) || strings.Contains(got, ".") {
			t.Errorf("EndpointName(%q) = %q, want %q…", tc.tool, got, tc.want)
		}
	}
	if worker.EndpointName("a.b") == worker.EndpointName("a_b") {
		t.Error("a.b and a_b must not share an endpoint name")
	}
}

func TestServiceVersionValidated(t *testing.T) {
	h := newHarness(t, worker.Config{})
	_, err := worker.New(h.nc, worker.Config{Store: h.store, Registry: h.reg, ServiceVersion: "dev"}, echo.Tool())
	if err == nil || !strings.Contains(err.Error(), "semantic version") {
		t.Fatalf("ServiceVersion dev: %v, want a semantic-version error", err)
	}
}

func TestSpansShareTheCommandTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	h := newHarness(t, worker.Config{Tracer: telemetry.NewWorkerTracer(tp)}, echo.Tool())
	const traceID, parentSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	c := h.writeCall("echo", `{}`)
	h.publish(toolSubject("echo"), c.command("echo"), nats.Header{utp.HeaderTraceparent: {"00-" + traceID + "-" + parentSpan + "-01"}})
	_, m := h.awaitReport(c.id)

	byName := map[string]tracetest.SpanStub{}
	deadline := time.Now().Add(10 * time.Second)
	for len(byName) < 3 && time.Now().Before(deadline) {
		for _, s := range exp.GetSpans() {
			byName[s.Name] = s
		}
		if len(byName) < 3 {
			time.Sleep(10 * time.Millisecond) // the command span ends just after the ack
		}
	}
	for _, name := range []string{telemetry.SpanCommand, telemetry.SpanExecute, telemetry.SpanReport} {
		s, ok := byName[name]
		if !ok {
			t.Fatalf("no %s span; have %v", name, byName)
		}
		if s.SpanContext.TraceID().String() != traceID {
			t.Errorf("%s trace id = %s, want %s", name, s.SpanContext.TraceID(), traceID)
		}
	}
	if p := byName[telemetry.SpanCommand].Parent.SpanID().String(); p != parentSpan {
		t.Errorf("utp.command parent = %s, want the command's span %s", p, parentSpan)
	}
	cmdID := byName[telemetry.SpanCommand].SpanContext.SpanID()
	for _, name := range []string{telemetry.SpanExecute, telemetry.SpanReport} {
		if byName[name].Parent.SpanID() != cmdID {
			t.Errorf("%s parent = %s, want utp.command %s", name, byName[name].Parent.SpanID(), cmdID)
		}
	}
	want := "00-" + traceID + "-" + byName[telemetry.SpanReport].SpanContext.SpanID().String() + "-01"
	if got := m.Header.Get(utp.HeaderTraceparent); got != want {
		t.Errorf("report traceparent = %s, want %s (the utp.report span)", got, want)
	}
	attrs := map[string]string{}
	for _, a := range byName[telemetry.SpanCommand].Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["tool_name"] != "echo" || attrs["tool_call_id"] != c.id || attrs["agent_turn_id"] != c.turn || attrs["status"] != "success" {
		t.Errorf("utp.command attributes = %v", attrs)
	}
}

func TestNoTracerKeepsTraceparent(t *testing.T) {
	h := newHarness(t, worker.Config{})
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	c := h.writeCall("echo", `{}`)
	h.publish(toolSubject("echo"), c.command("echo"), nats.Header{utp.HeaderTraceparent: {tp}})
	_, m := h.awaitReport(c.id)
	if got := m.Header.Get(utp.HeaderTraceparent); got != tp {
		t.Fatalf("report traceparent = %s, want the command's %s unchanged", got, tp)
	}
}

func TestTooLargeResults(t *testing.T) {
	big := strings.Repeat("x", 8<<10)
	tools := []worker.Tool{
		{Name: "bigvalue", Handler: func(context.Context, *worker.Call) (worker.Result, error) {
			return worker.OK(map[string]string{"blob": big}), nil
		}},
		{Name: "bigfailure", Handler: func(context.Context, *worker.Call) (worker.Result, error) {
			return worker.Result{}, worker.FailDetail(card.CodeUpstreamUnavailable, "upstream said: "+big, map[string]string{"body": big})
		}},
	}
	h := newHarnessStore(t, worker.Config{}, []boltstore.Option{boltstore.WithMaxCardBytes(4 << 10)}, tools...)
	for _, tool := range []string{"bigvalue", "bigfailure"} {
		t.Run(tool, func(t *testing.T) {
			c := h.writeCall(tool, `{}`)
			h.publish(toolSubject(tool), c.command(tool), nil)
			rep, _ := h.awaitReport(c.id)
			_, tr := h.result(rep)
			if rep.Status != card.StatusFailed || tr.Error == nil || tr.Error.Code != card.CodeInternalError ||
				!strings.Contains(tr.Error.Message, "too large for a card") {
				t.Fatalf("oversized %s: %+v %+v, want failed internal_error naming the size", tool, rep, tr.Error)
			}
		})
	}
}

// logWatch is a slog handler that signals when a message is logged.
type logWatch struct {
	msg  string
	seen chan struct{}
	once sync.Once
}

func (w *logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w *logWatch) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, w.msg) {
		w.once.Do(func() { close(w.seen) })
	}
	return nil
}
func (w *logWatch) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *logWatch) WithGroup(string) slog.Handler      { return w }

// TestStopCancelsCallsNotYetStarted: a call that is claimed but has not
// reached its handler when the drain deadline passes ends canceled without
// running.
func TestStopCancelsCallsNotYetStarted(t *testing.T) {
	watch := &logWatch{msg: "drain deadline passed", seen: make(chan struct{})}
	gate := make(chan struct{})
	inAuth := make(chan struct{}, 1)
	var ran bytes.Buffer
	var ranMu sync.Mutex
	tool := worker.Tool{Name: "gated", Handler: func(context.Context, *worker.Call) (worker.Result, error) {
		ranMu.Lock()
		ran.WriteString("ran")
		ranMu.Unlock()
		return worker.OK(nil), nil
	}}
	az := worker.AuthorizerFunc(func(ctx context.Context, c *worker.Call) error {
		if c.ToolName == "gated" {
			inAuth <- struct{}{}
			<-gate
		}
		return nil
	})
	h := newHarness(t, worker.Config{Authorizer: az, Logger: slog.New(watch)}, tool)
	c := h.writeCall("gated", `{}`)
	h.publish(toolSubject("gated"), c.command("gated"), nil)
	<-inAuth
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- h.rt.Stop(ctx) }()
	<-watch.seen // the deadline passed and in-flight calls were canceled
	close(gate)
	if err := <-stopped; !errors.Is(err, worker.ErrDrainTimeout) {
		t.Fatalf("Stop = %v, want ErrDrainTimeout", err)
	}
	rep, _ := h.awaitReport(c.id)
	if _, tr := h.result(rep); rep.Status != card.StatusCanceled || tr.Error.Code != card.CodeCanceled {
		t.Fatalf("call gated at shutdown: %+v %+v, want canceled", rep, tr.Error)
	}
	ranMu.Lock()
	defer ranMu.Unlock()
	if ran.Len() != 0 {
		t.Fatal("the handler ran after the drain deadline")
	}
}
