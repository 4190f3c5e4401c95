package mesh_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestSingleNodeCallsSendNoReport: on a single node the result's put
// stores the call's inbox entry, so the worker sends no report — neither
// a request on svc.inbox.report nor one through the command stream — and
// every call's agent is woken by its wakeup, one per call, which carries
// the result card, so the agent reads none.
func TestSingleNodeCallsSendNoReport(t *testing.T) {
	ctx := context.Background()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quiet, Tools: []worker.Tool{echo.Tool()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	nc := m.Conn()
	reports := make(chan *nats.Msg, 64)
	for _, pattern := range []func(string) (string, error){subjects.InboxReportRequestPattern, subjects.InboxReportPattern} {
		p, err := pattern(subjects.DefaultVersion)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := nc.ChanSubscribe(p, reports)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	// The agent reads no result card: its wakeup carries it.
	reads := make(chan *nats.Msg, 64)
	rsub, err := nc.ChanSubscribe("cg."+subjects.DefaultVersion+".demo.*.svc.cardstore.>", reads)
	if err != nil {
		t.Fatal(err)
	}
	defer rsub.Unsubscribe()
	wp, err := subjects.WakeupPattern(subjects.DefaultVersion, "demo", "*", "agent-d")
	if err != nil {
		t.Fatal(err)
	}
	wakes, err := nc.SubscribeSync(wp)
	if err != nil {
		t.Fatal(err)
	}
	defer wakes.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	ac, err := agent.New(nc, agent.Config{Project: "demo", AgentID: "agent-d"})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	const calls = 5
	for i := range calls {
		// A tool_call_id of the client's own: Call waits for the wakeup
		// without looking at the inbox first.
		out, err := ac.Call(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: "t-doorbell", Arguments: json.RawMessage(`{"i":1}`)})
		if err != nil || out.Result.Status != card.StatusSuccess {
			t.Fatalf("call %d: %v %+v", i, err, out)
		}
		// Its doorbell rang: a wakeup for its entry.
		msg, err := wakes.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("call %d: no wakeup: %v", i, err)
		}
		var w utp.Wakeup
		if err := json.Unmarshal(msg.Data, &w); err != nil || w.ToolCallID != out.Call.ToolCallID || w.ToolResultCardID != out.ResultCard.CardID || len(w.ResultCard) == 0 {
			t.Fatalf("call %d: wakeup %+v, %v; want its result's", i, w, err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := len(reports); n != 0 {
		t.Fatalf("%d reports sent for %d calls, want none (the result's put stored each entry)", n, calls)
	}
	for len(reads) > 0 {
		if m := <-reads; strings.Contains(m.Subject, ".svc.cardstore.get") {
			t.Fatalf("the agent read a card (%s) though each wakeup carried its result card", m.Subject)
		}
	}
	if n, _, _ := wakes.Pending(); n != 0 {
		t.Fatalf("%d more wakeups than calls", n)
	}
	es, err := m.Inbox().List(ctx, "demo", inbox.ListQuery{AgentID: "agent-d", State: inbox.StateAll, Limit: 10})
	if err != nil || len(es) != calls {
		t.Fatalf("entries = %d, %v; want %d", len(es), err, calls)
	}
}
