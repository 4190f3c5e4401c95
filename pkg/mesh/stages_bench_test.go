package mesh_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// BenchmarkRoundTripStages splits the secured round trip at c=1 (in
// process, echo) into the stages its trace shows, as the median over the
// calls of each stage's offset from the agent's Call, in µs:
//
//	command    the worker has the command (utp.command starts): admission, and
//	           the command's publish beside the tool.call card's commit
//	execute    the handler starts (utp.execute): the worker's start_call
//	           answered, after the card's commit
//	report     the result is written (utp.report: put_result, the result's
//	           commit with the inbox entry)
//	wakeup     the inbox has rung the wakeup (utp.wakeup ends)
//	call       Call returns
//
// report-span-µs is the median duration of the report span (the result's
// commit). id=fresh lets the agent pick each tool_call_id; id=caller picks
// them as a runtime passing its model's ids does. docs/performance.md uses
// it to show where a call's time goes.
func BenchmarkRoundTripStages(b *testing.B) {
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(ctx)
	cfg := mesh.Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", Logger: quiet, Tools: []worker.Tool{echo.Tool()},
		Auth: &mesh.AuthConfig{}, Identities: &mesh.IdentityConfig{}, TracerProvider: tp}
	m, err := mesh.Start(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Stop(ctx)
	opt, err := creds.Option(m.CredsFile("agent-demo"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Auth().Store.PutPolicies(ctx, "demo", `permit(principal, action == Action::"echo", resource in Project::"demo");`); err != nil {
		b.Fatal(err)
	}
	key, _, err := m.Auth().Keys.Ensure(ctx, "demo")
	if err != nil {
		b.Fatal(err)
	}
	acfg := agent.Config{Project: "demo", Channel: "main", AgentID: "bench-agent"}
	if acfg.Mandate, err = mandate.Issue(key, mandate.Claims{Subject: "bench-agent", ExpiresAt: time.Now().Add(time.Hour).Unix(),
		Mandate: mandate.Grant{PolicySet: `permit(principal, action == Action::"echo", resource);`}}, time.Now()); err != nil {
		b.Fatal(err)
	}
	nc, err := nats.Connect(m.ClientURL(), opt)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	ac, err := agent.New(nc, acfg)
	if err != nil {
		b.Fatal(err)
	}
	defer ac.Close()
	for _, mode := range []string{"fresh", "caller"} {
		b.Run("id="+mode, func(b *testing.B) {
			rec.Reset()
			stages(b, ac, rec, mode == "caller")
		})
	}
}

// stages runs b.N calls and reports their stages from the spans rec
// recorded. callerIDs makes the caller choose each tool_call_id, as a
// runtime passing its model's ids does: Call then looks the call up in
// the inbox before waiting (a re-sent id may have its result already).
func stages(b *testing.B, ac *agent.Client, rec *tracetest.SpanRecorder, callerIDs bool) {
	ctx := context.Background()
	type times struct{ start, end time.Time }
	calls := map[string]times{}
	call := func(i int, warm bool) {
		req := agent.CallRequest{ToolName: "echo", AgentTurnID: fmt.Sprintf("turn-%d", i%50), Arguments: json.RawMessage(`{"i":1}`)}
		if callerIDs {
			req.ToolCallID = fmt.Sprintf("call-%d-%v-%d", b.N, warm, i)
		}
		t0 := time.Now()
		r, err := ac.Call(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if r.Result.Status != "success" {
			b.Fatalf("call %s ended %s", r.Call.ToolCallID, r.Result.Status)
		}
		calls[r.Call.ToolCallID] = times{t0, time.Now()}
	}
	for i := range 200 { // warm up: connections, caches, the file's first pages
		call(i, true)
	}
	clear(calls)
	b.ResetTimer()
	for i := range b.N {
		call(i, false)
	}
	b.StopTimer()
	_ = ac.Flush(ctx)
	time.Sleep(200 * time.Millisecond) // the last wakeup span ends after its Call returned

	// Offsets of each stage from the call's start, by tool_call_id.
	offsets := map[string][]float64{}
	var reports []float64
	for _, s := range rec.Ended() {
		id := ""
		for _, kv := range s.Attributes() {
			if kv.Key == attribute.Key(utp.AttrToolCallID) {
				id = kv.Value.AsString()
			}
		}
		c, ok := calls[id]
		if !ok {
			continue
		}
		us := func(t time.Time) float64 { return float64(t.Sub(c.start).Microseconds()) }
		switch s.Name() {
		case utp.SpanCommand:
			offsets["command"] = append(offsets["command"], us(s.StartTime()))
		case utp.SpanExecute:
			offsets["execute"] = append(offsets["execute"], us(s.StartTime()))
		case utp.SpanReport:
			offsets["report"] = append(offsets["report"], us(s.EndTime()))
			reports = append(reports, float64(s.EndTime().Sub(s.StartTime()).Microseconds()))
		case utp.SpanWakeup:
			offsets["wakeup"] = append(offsets["wakeup"], us(s.EndTime()))
		}
	}
	for _, c := range calls {
		offsets["call"] = append(offsets["call"], float64(c.end.Sub(c.start).Microseconds()))
	}
	median := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	for _, st := range []string{"command", "execute", "report", "wakeup", "call"} {
		b.ReportMetric(median(offsets[st]), st+"-µs")
	}
	b.ReportMetric(median(reports), "report-span-µs")
}
