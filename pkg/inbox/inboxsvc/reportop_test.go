package inboxsvc

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// request sends a report body as a svc.inbox.report request and returns
// the reply or the error.
func (e *env) request(project string, body any, traceparent string) (inbox.ReportReply, error) {
	e.t.Helper()
	subj, err := subjects.InboxReportRequest(ver, project, "c1")
	must(e.t, err)
	var rep inbox.ReportReply
	err = svc.CallMsg(context.Background(), e.nc, e.reportMsg(subj.String(), body, traceparent), inbox.Codes, &rep)
	return rep, err
}

func TestReportRequest(t *testing.T) {
	e := newEnv(t, 4)
	wakes := e.wakeups("p1", "agent-a")
	dls := e.deadLetters()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	c := e.putResult("p1", "agent-a", "turn-1", "call-1", 0)
	rep, err := e.request("p1", c.report(), tp)
	must(t, err)
	if rep.InboxID == "" || rep.State != inbox.StatePending {
		t.Fatalf("reply = %+v, want a pending entry", rep)
	}
	// The reply comes after the entry is on disk and the wakeup is stored.
	got, err := e.svc.Get(context.Background(), "p1", rep.InboxID)
	must(t, err)
	if got.ToolCallID != "call-1" || got.Traceparent != tp {
		t.Fatalf("entry = %+v", got)
	}
	w := decodeWakeup(t, next(t, wakes))
	if w.InboxID != rep.InboxID || w.ToolResultCardID != c.card.CardID {
		t.Fatalf("wakeup = %+v, want inbox_id %s", w, rep.InboxID)
	}
	js, err := jetstream.New(e.nc)
	must(t, err)
	st, err := js.Stream(context.Background(), streams.WakeupStream(ver))
	must(t, err)
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("wakeup stream holds %d messages, want 1", n)
	}
	// Nothing went through the command stream.
	cmd, err := js.Stream(context.Background(), streams.CommandStream(ver))
	must(t, err)
	if n := cmd.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("command stream holds %d messages, want 0 (the report was a request)", n)
	}

	// The same report again, by request or through the stream: the same
	// entry, no second wakeup.
	again, err := e.request("p1", c.report(), tp)
	must(t, err)
	if again.InboxID != rep.InboxID {
		t.Fatalf("duplicate reply = %+v, want inbox_id %s", again, rep.InboxID)
	}
	e.publish("p1", c.report(), tp)
	e.settle()
	if n := pendingCount(t, wakes); n != 0 {
		t.Fatalf("%d more wakeups for duplicates, want 0", n)
	}

	// A report that can never be accepted is refused (inbox.ErrRefused) and
	// dead-lettered, naming what was wrong.
	bad := c.report()
	bad["tool_result_card_id"] = "01890000-0000-7000-8000-000000000000"
	_, err = e.request("p1", bad, "")
	if !errors.Is(err, inbox.ErrRefused) {
		t.Fatalf("refused report: err = %v, want inbox.ErrRefused", err)
	}
	var dl DeadLetter
	must(t, json.Unmarshal(next(t, dls).Data, &dl))
	if dl.ToolCallID != "call-1" || dl.Reason == "" {
		t.Fatalf("dead letter = %+v", dl)
	}
	_, err = e.request("p1", []byte(`{"tool_call_id":`), "")
	if !errors.Is(err, inbox.ErrRefused) {
		t.Fatalf("malformed report: err = %v, want inbox.ErrRefused", err)
	}
	_ = next(t, dls)
}

func TestReportRequestStoreUnavailable(t *testing.T) {
	e := newEnv(t, 2)
	c := e.putResult("p1", "agent-a", "turn-1", "call-1", 0)
	e.stop()
	fs := &flakyStore{Store: e.store}
	fs.failures.Store(1 << 30)
	e.cfg.Store = fs
	e.start()
	_, err := e.request("p1", c.report(), "")
	if !errors.Is(err, svc.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable (the worker then stores the report in the stream)", err)
	}
	if es := e.list("p1", inbox.ListQuery{AgentID: "agent-a", State: inbox.StateAll}); len(es) != 0 {
		t.Fatalf("entries = %+v, want none", es)
	}
}

func TestAckLazy(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	c := e.putResult("p1", "agent-a", "turn-1", "call-1", 0)
	rep, err := e.request("p1", c.report(), "")
	must(t, err)

	n, err := e.client.AckLazy(ctx, "p1", rep.InboxID)
	must(t, err)
	if n != 1 {
		t.Fatalf("AckLazy = %d, want 1 pending entry acked", n)
	}
	// Reads see the ack at once, before it is committed.
	got, err := e.client.Get(ctx, "p1", rep.InboxID)
	must(t, err)
	if got.State != inbox.StateAcked || got.AckedAt == nil {
		t.Fatalf("entry after a lazy ack = %+v, want acked", got)
	}
	if es := e.list("p1", inbox.ListQuery{AgentID: "agent-a"}); len(es) != 0 {
		t.Fatalf("pending entries = %+v, want none", es)
	}
	if _, err := e.client.AckLazy(ctx, "p1", "01890000-0000-7000-8000-000000000000"); !errors.Is(err, inbox.ErrNotFound) {
		t.Fatalf("lazy ack of an unknown id: err = %v, want inbox.ErrNotFound", err)
	}
	// The next transaction carries it to disk (boltinbox tests the details).
	must(t, e.db.Flush(ctx))
	// A restart reads it from the file.
	e.stop()
	e.start()
	got, err = e.svc.Get(ctx, "p1", rep.InboxID)
	must(t, err)
	if got.State != inbox.StateAcked {
		t.Fatalf("entry after restart = %+v, want acked", got)
	}
}
