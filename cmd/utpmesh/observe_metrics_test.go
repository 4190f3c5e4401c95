package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/telemetry"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

var quietLog = slog.New(slog.DiscardHandler)

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(body)
}

// scrapeUntil scrapes url until every line of want appears, or fails.
func scrapeUntil(t *testing.T, url string, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		body := get(t, url)
		missing := ""
		for _, w := range want {
			if !strings.Contains(body, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never showed %q; last scrape:\n%s", missing, body)
		}
		time.Sleep(20 * time.Millisecond) // poll: the inbox records its outcome just after the wakeup
	}
}

// TestMeshMetricsAndTrace runs a whole mesh with metrics and tracing on,
// makes one call with a known traceparent, scrapes /metrics over HTTP and
// checks that command → execute → report → wakeup spans share its trace.
func TestMeshMetricsAndTrace(t *testing.T) {
	ctx := context.Background()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
		TracerProvider: tp, Tools: []worker.Tool{echo.Tool()}, Logger: quietLog, Worker: worker.Config{ServiceVersion: "9.9.9"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })

	ac, err := agent.New(m.Conn(), agent.Config{Project: "demo", AgentID: "obs-agent"})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	out, err := ac.Call(agent.ContextWithTraceparent(ctx, "00-"+traceID+"-00f067aa0ba902b7-01"),
		agent.CallRequest{ToolName: "echo", AgentTurnID: "turn-obs", Arguments: json.RawMessage(`{"x":1}`)})
	if err != nil || out.Result.Status != card.StatusSuccess {
		t.Fatalf("call: %v %+v", err, out)
	}

	body := scrapeUntil(t, m.MetricsURL(),
		`utpmesh_build_info{version="9.9.9"} 1`,
		`utpmesh_worker_calls_total{code="",status="success",tool="echo"} 1`,
		`utpmesh_worker_call_duration_seconds_count{status="success",tool="echo"} 1`,
		`utpmesh_worker_in_flight{tool="echo"} 0`,
		`utpmesh_inbox_reports_total{outcome="accepted"} 1`,
		`utpmesh_inbox_wakeups_total 1`,
		`utpmesh_inbox_wakeup_lag_seconds_count 1`,
		`utpmesh_inbox_pending_entries 0`, // the agent acknowledged its entry
		`utpmesh_cardstore_commit_duration_seconds_bucket`,
		`utpmesh_cardstore_commit_group_size_bucket`,
	)
	if strings.Contains(body, out.Call.ToolCallID) {
		t.Error("a tool_call_id leaked into a metric label")
	}

	names := map[string]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for len(names) < 4 && time.Now().Before(deadline) {
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID().String() == traceID {
				names[s.Name] = true
			}
		}
		if len(names) < 4 {
			time.Sleep(10 * time.Millisecond) // spans end just after the wakeup the agent saw
		}
	}
	for _, n := range []string{telemetry.SpanCommand, telemetry.SpanExecute, telemetry.SpanReport, telemetry.SpanWakeup} {
		if !names[n] {
			t.Errorf("no %s span in trace %s (have %v)", n, traceID, names)
		}
	}
}

// TestMeshLimits: the NATS max payload must carry the largest card, and a
// lowered card limit is enforced over NATS with a clear error.
func TestMeshLimits(t *testing.T) {
	tests := []struct {
		name       string
		payload    int32
		cardBytes  int
		errContain string
	}{
		{"payload below the card limit", 512 << 10, 0, "raise the max payload"},
		{"payload too small", 1024, 0, "64 KiB"},
		{"card limit above the maximum", 0, 2 << 20, "max card bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mesh.Start(context.Background(), mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quietLog,
				MaxPayload: tc.payload, MaxCardBytes: tc.cardBytes})
			if err == nil || !strings.Contains(err.Error(), tc.errContain) {
				t.Fatalf("Start = %v, want an error containing %q", err, tc.errContain)
			}
		})
	}

	m, err := mesh.Start(context.Background(), mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quietLog,
		MaxPayload: 128 << 10, MaxCardBytes: 2048})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	if got := m.Conn().MaxPayload(); got != 128<<10 {
		t.Fatalf("max payload = %d", got)
	}
	st, err := natsstore.NewClient(m.Conn())
	if err != nil {
		t.Fatal(err)
	}
	content, _ := json.Marshal(map[string]string{"text": strings.Repeat("x", 4096)})
	c := &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: "note", Content: content, CreatedAt: time.Now().UTC()}
	err = st.Put(context.Background(), c)
	if !errors.Is(err, cardstore.ErrTooLarge) || !strings.Contains(err.Error(), "2048") {
		t.Fatalf("put of a 4 KiB card with a 2048-byte limit: %v, want ErrTooLarge naming the limit", err)
	}
}
