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

// fullTools is tools of records t0…t(n-1).
func fullTools(n int) string {
	s := ""
	for i := range n {
		s += fmt.Sprintf("t%d ", i)
	}
	return s
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
// MaxBytes without waiting for the interval, its records in order; Close
// publishes the rest and records after Close leave one message each.
func TestBatcherBoundsAndClose(t *testing.T) {
	srv := meshtest.NATS(t)
	pub, subc := meshtest.Conn(t, srv), meshtest.Conn(t, srv)
	sub := auditSub(t, subc)
	b := natsauthz.NewBatcher(pub, natsauthz.BatchConfig{Interval: time.Hour, MaxBytes: 1000})
	ctx := context.Background()
	// Thirty records of ~200 bytes: several full messages while they are
	// audited, the rest at Close; one record of another subject beside.
	const n = 30
	for i := range n {
		b.Audit(ctx, "v1r3", rec("demo", "main", i))
	}
	b.Audit(ctx, "v1r3", rec("demo", "x", 101))
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var got, other string
	full := 0
	for got != fullTools(n) {
		msg, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("records so far %q: %v", got, err)
		}
		recs, err := authz.ParseAuditRecords(msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		if msg.Subject != "cg.v1r3.demo.main.evt.sys.authz.decision" {
			other += tools(recs)
			continue
		}
		got += tools(recs)
		if len(msg.Data) >= 1000 {
			// A full message: its last record took it to MaxBytes.
			if bytes.LastIndexByte(msg.Data, '\n') >= 1000 {
				t.Fatalf("a message of %d bytes whose records before the last already reach MaxBytes", len(msg.Data))
			}
			full++
		} else if got != fullTools(n) {
			t.Fatalf("a message below MaxBytes (%d bytes) before the last records: %q", len(msg.Data), tools(recs))
		}
		if len(got) > len(fullTools(n)) || fullTools(n)[:len(got)] != got {
			t.Fatalf("records out of order: %q", got)
		}
	}
	if full < 2 {
		t.Fatalf("%d full messages, want the records to fill several", full)
	}
	if other == "" {
		if _, recs := next(t, sub); tools(recs) != "t101 " {
			t.Fatalf("the other subject's message: %s", tools(recs))
		}
	} else if other != "t101 " {
		t.Fatalf("the other subject's message: %s", other)
	}
	var recs []authz.AuditRecord
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
