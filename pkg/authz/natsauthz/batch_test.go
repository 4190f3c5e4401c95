package natsauthz_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
)

// auditSub subscribes to every decision record of version v1r3.
func auditSub(t *testing.T, nc *nats.Conn) *nats.Subscription {
	t.Helper()
	sub, err := nc.SubscribeSync("cg.v1r3.*.*.evt.sys.authz.decision")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return sub
}

// next returns the subject and records of the next message.
func next(t *testing.T, sub *nats.Subscription) (string, []authz.AuditRecord) {
	t.Helper()
	msg, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := authz.ParseAuditRecords(msg.Data)
	if err != nil {
		t.Fatalf("message %q: %v", msg.Data, err)
	}
	return msg.Subject, recs
}

func rec(project, channel string, i int) *authz.AuditRecord {
	return &authz.AuditRecord{ProjectID: project, ChannelID: channel, AgentID: "a", ToolName: fmt.Sprintf("t%d", i),
		ToolCallID: fmt.Sprint(i), Decision: authz.DecisionAllow, Reason: authz.ReasonAllowed, Policies: []string{}}
}

func tools(recs []authz.AuditRecord) string {
	s := ""
	for _, r := range recs {
		s += r.ToolName + " "
	}
	return s
}

// TestBatcherGroupsBySubject: the records of one subject leave as one
// message in their order, another subject's as another message, nothing
// before the interval or Close; the interval's timer publishes too.
func TestBatcherGroupsBySubject(t *testing.T) {
	srv := meshtest.NATS(t)
	pub, subc := meshtest.Conn(t, srv), meshtest.Conn(t, srv)
	sub := auditSub(t, subc)
	b := natsauthz.NewBatcher(pub, natsauthz.BatchConfig{Interval: time.Hour})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		b.Audit(ctx, "v1r3", rec("demo", "main", i))
	}
	b.Audit(ctx, "v1r3", rec("other", "main", 9))
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := subc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := sub.Pending(); n != 0 {
		t.Fatalf("%d messages before the interval, want 0", n)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	subj, recs := next(t, sub)
	if subj != "cg.v1r3.demo.main.evt.sys.authz.decision" || tools(recs) != "t0 t1 t2 " {
		t.Fatalf("first message %s: %s", subj, tools(recs))
	}
	subj, recs = next(t, sub)
	if subj != "cg.v1r3.other.main.evt.sys.authz.decision" || tools(recs) != "t9 " {
		t.Fatalf("second message %s: %s", subj, tools(recs))
	}

	timed := natsauthz.NewBatcher(pub, natsauthz.BatchConfig{Interval: 20 * time.Millisecond})
	defer timed.Close(ctx)
	timed.Audit(ctx, "v1r3", rec("demo", "main", 3))
	timed.Audit(ctx, "v1r3", rec("demo", "main", 4))
	var got string
	for got != "t3 t4 " {
		_, recs = next(t, sub) // the timer may split the two
		got += tools(recs)
	}
}

// TestBatcherBoundsAndClose: a subject's message leaves once it reaches
// MaxBytes without waiting for the interval; Close publishes the rest and
// records after Close leave one message each.
func TestBatcherBoundsAndClose(t *testing.T) {
	srv := meshtest.NATS(t)
	pub, subc := meshtest.Conn(t, srv), meshtest.Conn(t, srv)
	sub := auditSub(t, subc)
	b := natsauthz.NewBatcher(pub, natsauthz.BatchConfig{Interval: time.Hour, MaxBytes: 1000})
	ctx := context.Background()
	n := 0
	for n = 0; ; n++ {
		b.Audit(ctx, "v1r3", rec("demo", "main", n))
		if err := pub.Flush(); err != nil {
			t.Fatal(err)
		}
		if p, _, _ := sub.Pending(); p > 0 || n > 100 {
			break
		}
	}
	msg, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := authz.ParseAuditRecords(msg.Data)
	// Its last record took it to MaxBytes: without that line it is below.
	if err != nil || len(recs) < 2 || len(msg.Data) < 1000 || bytes.LastIndexByte(msg.Data, '\n') >= 1000 {
		t.Fatalf("the first message has %d bytes, %d records (%v); want the records up to the one that reaches MaxBytes", len(msg.Data), len(recs), err)
	}
	// The records after the full message's, then t100, leave at Close.
	want := ""
	for i := len(recs); i <= n; i++ {
		want += fmt.Sprintf("t%d ", i)
	}
	b.Audit(ctx, "v1r3", rec("demo", "main", 100))
	b.Audit(ctx, "v1r3", rec("demo", "x", 101))
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, recs = next(t, sub); tools(recs) != want+"t100 " {
		t.Fatalf("closed message: %s, want %st100", tools(recs), want)
	}
	if _, recs = next(t, sub); tools(recs) != "t101 " {
		t.Fatalf("closed message: %s", tools(recs))
	}
	b.Audit(ctx, "v1r3", rec("demo", "main", 102))
	b.Audit(ctx, "v1r3", rec("demo", "main", 103))
	for _, want := range []string{"t102 ", "t103 "} {
		if _, recs = next(t, sub); tools(recs) != want {
			t.Fatalf("after Close: %s, want %s", tools(recs), want)
		}
	}
	if err := b.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
