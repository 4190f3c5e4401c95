package inboxsvc

import (
	"context"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/telemetry"
)

type obsRecorder struct {
	mu       sync.Mutex
	outcomes map[string]int
	lags     []time.Duration
}

func (r *obsRecorder) ReportHandled(o string) { r.mu.Lock(); r.outcomes[o]++; r.mu.Unlock() }
func (r *obsRecorder) WakeupSent(l time.Duration) {
	r.mu.Lock()
	r.lags = append(r.lags, l)
	r.mu.Unlock()
}

func TestObserverPendingAndSpan(t *testing.T) {
	e := newEnv(t, 0)
	e.stop() // restart with an observer and a tracer
	rec := &obsRecorder{outcomes: map[string]int{}}
	exp := tracetest.NewInMemoryExporter()
	e.cfg.Observer = rec
	e.cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	e.start()

	wk := e.wakeups("p1", "agent-1")
	dl := e.deadLetters()
	c := e.putResult("p1", "agent-1", "turn-1", "call-1", 1)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	tp := "00-" + traceID + "-00f067aa0ba902b7-01"
	e.publish("p1", c.report(), tp)
	next(t, wk)
	e.publish("p1", c.report(), tp) // duplicate
	bad := c.report()
	bad["tool_result_card_id"] = "01a1fb9f-97d0-7a73-ac8e-4a29f7750000" // no such card
	e.publish("p1", bad, "")
	next(t, dl)
	e.settle()

	rec.mu.Lock()
	got := map[string]int{}
	for k, v := range rec.outcomes {
		got[k] = v
	}
	lags := append([]time.Duration(nil), rec.lags...)
	rec.mu.Unlock()
	want := map[string]int{OutcomeAccepted: 1, OutcomeDuplicate: 1, OutcomeRefused: 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("outcome %s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	if len(lags) != 1 || lags[0] <= 0 {
		t.Errorf("wakeup lags = %v, want one positive lag", lags)
	}
	n, err := e.svc.Pending()
	if err != nil || n != 1 {
		t.Fatalf("Pending = %d, %v; want 1", n, err)
	}
	es := e.list("p1", inbox.ListQuery{AgentID: "agent-1"})
	if _, err := e.svc.Ack(context.Background(), "p1", es[0].InboxID); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.svc.Pending(); n != 0 {
		t.Fatalf("Pending after ack = %d, want 0", n)
	}

	var wakeSpans int
	for _, s := range exp.GetSpans() {
		if s.Name != telemetry.SpanWakeup || s.SpanContext.TraceID().String() != traceID {
			continue
		}
		wakeSpans++
		if s.Parent.SpanID().String() != "00f067aa0ba902b7" {
			t.Errorf("utp.wakeup parent = %s, want the report's span", s.Parent.SpanID())
		}
	}
	if wakeSpans != 2 { // the report and its duplicate
		t.Errorf("utp.wakeup spans in the report's trace = %d, want 2", wakeSpans)
	}
}
