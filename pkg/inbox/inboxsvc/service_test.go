package inboxsvc

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/boltinbox"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

func TestHappyPath(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	wk := e.wakeups("p1", "agent-1")
	c := e.putResult("p1", "agent-1", "turn-1", "call-1", 3)
	tp := utp.NewTraceparent()
	e.publish("p1", c.report(), tp)

	m := next(t, wk)
	if want := "cg." + ver + ".p1.c1.cmd.agent.agent-1.wakeup"; m.Subject != want {
		t.Fatalf("wakeup subject = %s, want %s", m.Subject, want)
	}
	w := decodeWakeup(t, m)
	want := utp.Wakeup{
		AgentID: "agent-1", InboxID: w.InboxID, Reason: utp.ReasonToolResult, AgentTurnID: "turn-1",
		TurnEpoch: 3, ToolCallID: "call-1", ToolResultCardID: c.card.CardID, Status: card.StatusSuccess,
		AfterExecution: card.Suspend, StepID: "step-1",
	}
	if !reflect.DeepEqual(w, want) || !card.ValidID(w.InboxID) {
		t.Fatalf("wakeup = %+v\nwant %+v", w, want)
	}
	if got := m.Header.Get(utp.HeaderTraceparent); got != tp {
		t.Fatalf("wakeup traceparent = %q, want the report's %q", got, tp)
	}
	if got := m.Header.Get("Nats-Msg-Id"); got != "wakeup-"+w.InboxID {
		t.Fatalf("wakeup Nats-Msg-Id = %q", got)
	}
	if m.Header.Get(utp.HeaderAgentTurnID) != "turn-1" || m.Header.Get(utp.HeaderTurnEpoch) != "3" ||
		m.Header.Get(utp.HeaderSender) != "inbox" || m.Header.Get(utp.HeaderMsgType) != "wakeup" {
		t.Fatalf("wakeup headers = %v", m.Header)
	}
	e.settle() // the report is acked only after wakeup_sent_at is recorded

	es := e.list("p1", inbox.ListQuery{AgentID: "agent-1"})
	if len(es) != 1 {
		t.Fatalf("pending entries = %+v, want one", es)
	}
	got := es[0]
	if got.InboxID != w.InboxID || got.ProjectID != "p1" || got.ChannelID != "c1" || got.AgentID != "agent-1" ||
		got.AgentTurnID != "turn-1" || got.TurnEpoch != 3 || got.ToolCallID != "call-1" ||
		got.ToolResultCardID != c.card.CardID || got.Status != card.StatusSuccess || got.AfterExecution != card.Suspend ||
		got.StepID != "step-1" || got.ToolName != "web_search" || got.State != inbox.StatePending ||
		got.CreatedAt.IsZero() || got.AckedAt != nil || got.WakeupSentAt == nil || got.Traceparent != tp {
		t.Fatalf("entry = %+v", got)
	}
	if es := e.list("p1", inbox.ListQuery{AgentID: "agent-1", AgentTurnID: "other-turn"}); len(es) != 0 {
		t.Fatalf("turn filter: %+v", es)
	}

	n, err := e.client.Ack(ctx, "p1", w.InboxID)
	if err != nil || n != 1 {
		t.Fatalf("ack = %d, %v; want 1", n, err)
	}
	if n, err := e.client.Ack(ctx, "p1", w.InboxID, w.InboxID); err != nil || n != 0 {
		t.Fatalf("re-ack = %d, %v; want a no-op success", n, err)
	}
	if es := e.list("p1", inbox.ListQuery{AgentID: "agent-1"}); len(es) != 0 {
		t.Fatalf("pending after ack: %+v", es)
	}
	acked := e.list("p1", inbox.ListQuery{AgentID: "agent-1", State: inbox.StateAcked})
	if len(acked) != 1 || acked[0].State != inbox.StateAcked || acked[0].AckedAt == nil {
		t.Fatalf("acked entries = %+v", acked)
	}
	g, err := e.client.Get(ctx, "p1", w.InboxID)
	if err != nil || g.State != inbox.StateAcked {
		t.Fatalf("get = %+v, %v", g, err)
	}
	// The local API sees the same.
	if l, err := e.svc.List(ctx, "p1", inbox.ListQuery{AgentID: "agent-1", State: inbox.StateAll}); err != nil || len(l) != 1 {
		t.Fatalf("local list = %+v, %v", l, err)
	}
}

func TestMissingTraceparentIsCreated(t *testing.T) {
	e := newEnv(t, 0)
	wk := e.wakeups("p1", "a")
	c := e.putResult("p1", "a", "t", "k", 0)
	e.publish("p1", c.report(), "")
	m := next(t, wk)
	if utp.TraceID(m.Header.Get(utp.HeaderTraceparent)) == "" {
		t.Fatalf("wakeup traceparent = %q, want a fresh valid one", m.Header.Get(utp.HeaderTraceparent))
	}
}

func TestDuplicateReport(t *testing.T) {
	e := newEnv(t, 1) // one at a time: the second report's wakeup follows the duplicate's handling
	wk := e.wakeups("p1", "a")
	c1 := e.putResult("p1", "a", "t", "call-1", 1)
	c2 := e.putResult("p1", "a", "t", "call-2", 1)
	e.publish("p1", c1.report(), "")
	e.publish("p1", c1.report(), "")
	e.publish("p1", c2.report(), "")

	seen := map[string]int{}
	for seen["call-2"] == 0 {
		seen[decodeWakeup(t, next(t, wk)).ToolCallID]++
	}
	e.settle()
	for pendingCount(t, wk) > 0 {
		seen[decodeWakeup(t, next(t, wk)).ToolCallID]++
	}
	if seen["call-1"] != 1 || seen["call-2"] != 1 {
		t.Fatalf("wakeups per call = %v, want one each", seen)
	}
	if es := e.list("p1", inbox.ListQuery{AgentID: "a", State: inbox.StateAll}); len(es) != 2 {
		t.Fatalf("entries = %+v, want two", es)
	}
}

func TestUnpublishedWakeupIsPublishedOnRedelivery(t *testing.T) {
	e := newEnv(t, 0)
	wk := e.wakeups("p1", "a")
	c := e.putResult("p1", "a", "t", "k", 0)
	// The crash window: the entry is stored, the process dies before the
	// wakeup is published and the report acked.
	rep, err := utp.ParseReport(mustJSON(t, c.report()))
	must(t, err)
	stored, created, err := e.db.Insert(context.Background(), "p1", "c1", rep, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if err != nil || !created {
		t.Fatalf("insert = created %v, %v", created, err)
	}
	e.publish("p1", c.report(), "") // the redelivery
	w := decodeWakeup(t, next(t, wk))
	if w.InboxID != stored.InboxID {
		t.Fatalf("wakeup for %s, want the stored entry %s", w.InboxID, stored.InboxID)
	}
	e.settle()
	g, err := e.client.Get(context.Background(), "p1", stored.InboxID)
	if err != nil || g.WakeupSentAt == nil {
		t.Fatalf("entry after redelivery = %+v, %v; want wakeup_sent_at set", g, err)
	}
	if es := e.list("p1", inbox.ListQuery{AgentID: "a", State: inbox.StateAll}); len(es) != 1 {
		t.Fatalf("entries = %d, want 1", len(es))
	}
}

func TestStaleEpoch(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	wk := e.wakeups("p1", "a")
	if got, err := e.client.SetEpoch(ctx, "p1", "t", 2); err != nil || got != 2 {
		t.Fatalf("set_epoch 2 = %d, %v", got, err)
	}
	if got, err := e.client.SetEpoch(ctx, "p1", "t", 1); err != nil || got != 2 {
		t.Fatalf("set_epoch 1 = %d, %v; epochs never go down", got, err)
	}
	old := e.putResult("p1", "a", "t", "old", 1)
	cur := e.putResult("p1", "a", "t", "cur", 2)
	e.publish("p1", old.report(), "")
	e.publish("p1", cur.report(), "")
	if w := decodeWakeup(t, next(t, wk)); w.ToolCallID != "cur" {
		t.Fatalf("first wakeup is for %s, want cur (the stale report wakes no one)", w.ToolCallID)
	}
	e.settle()
	if n := pendingCount(t, wk); n != 0 {
		t.Fatalf("%d extra wakeups", n)
	}
	stale := e.list("p1", inbox.ListQuery{AgentID: "a", State: inbox.StateStale})
	if len(stale) != 1 || stale[0].ToolCallID != "old" || stale[0].WakeupSentAt != nil {
		t.Fatalf("stale entries = %+v", stale)
	}
	pending := e.list("p1", inbox.ListQuery{AgentID: "a"})
	if len(pending) != 1 || pending[0].ToolCallID != "cur" {
		t.Fatalf("pending entries = %+v", pending)
	}
	// Acking a stale entry is a no-op success.
	if n, err := e.client.Ack(ctx, "p1", stale[0].InboxID); err != nil || n != 0 {
		t.Fatalf("ack stale = %d, %v", n, err)
	}
	// A newer epoch turns the turn's older pending entries stale.
	if got, err := e.client.SetEpoch(ctx, "p1", "t", 3); err != nil || got != 3 {
		t.Fatalf("set_epoch 3 = %d, %v", got, err)
	}
	if es := e.list("p1", inbox.ListQuery{AgentID: "a"}); len(es) != 0 {
		t.Fatalf("pending after set_epoch 3 = %+v", es)
	}
	if es := e.list("p1", inbox.ListQuery{AgentID: "a", State: inbox.StateStale}); len(es) != 2 {
		t.Fatalf("stale after set_epoch 3 = %+v", es)
	}
}

func TestRefusedReportsAreDeadLettered(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	dl := e.deadLetters()
	wk := e.wakeups("p1", "a")
	good := e.putResult("p1", "a", "t", "k", 0)

	callCard := &card.Card{
		CardID: card.NewID(), ProjectID: "p1", Type: card.TypeToolCall, Content: json.RawMessage(`{"tool_name":"x","arguments":{}}`),
		ToolCallID: "k", CreatedAt: time.Now(), Metadata: card.Metadata{AgentTurnID: "t"},
	}
	must(t, e.store.Put(ctx, callCard))
	otherCall := e.putResult("p1", "a", "t", "other-call", 0)
	otherTurn := e.putResult("p1", "a", "other-turn", "k", 0)
	inOtherProject := e.putResult("p2", "a", "t", "k3", 0)

	with := func(kv ...any) map[string]any {
		r := good.report()
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(r, kv[i].(string))
				continue
			}
			r[kv[i].(string)] = kv[i+1]
		}
		return r
	}
	cases := []struct {
		name   string
		body   any
		reason string
	}{
		{"missing card", with("tool_result_card_id", card.NewID()), "no such card in project p1"},
		{"tool.call card", with("tool_result_card_id", callCard.CardID), `not "tool.result"`},
		{"other tool_call_id", with("tool_result_card_id", otherCall.card.CardID), `tool_call_id "other-call" differs`},
		{"other turn", with("tool_result_card_id", otherTurn.card.CardID), "agent_turn_id"},
		{"other status", with("status", "failed"), `content.status "success" differs from the report's status "failed"`},
		{"card of another project", with("tool_result_card_id", inOtherProject.card.CardID), "no such card in project p1"},
		{"malformed JSON", []byte(`{"tool_call_id": "k",`), "not a JSON object"},
		{"inline result", with("result", map[string]any{"x": 1}), "inline results are not allowed"},
		{"bad status", with("status", "done"), "status"},
		{"missing epoch", with("turn_epoch", nil), "turn_epoch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.publish("p1", tc.body, "")
			m := next(t, dl)
			var rec DeadLetter
			must(t, json.Unmarshal(m.Data, &rec))
			if !strings.Contains(rec.Reason, tc.reason) || rec.Source != "inbox" ||
				rec.Subject != "cg."+ver+".p1.c1.cmd.sys.inbox.report" || rec.Body == "" || rec.ReceivedAt.IsZero() {
				t.Fatalf("dead letter = %+v, want reason containing %q", rec, tc.reason)
			}
			if m.Subject != "cg."+ver+".p1.c1.evt.sys.deadletter.command" {
				t.Fatalf("dead letter subject = %s", m.Subject)
			}
		})
	}
	e.settle()
	if n := pendingCount(t, wk); n != 0 {
		t.Fatalf("%d wakeups for refused reports", n)
	}
	if es := e.list("p1", inbox.ListQuery{AgentID: "a", State: inbox.StateAll}); len(es) != 0 {
		t.Fatalf("entries for refused reports: %+v", es)
	}
}

func TestDeadLetterBodyIsTruncated(t *testing.T) {
	e := newEnv(t, 0)
	dl := e.deadLetters()
	big := []byte(`{"result":"` + strings.Repeat("x", 10000) + `"}`)
	e.publish("p1", big, "")
	var rec DeadLetter
	must(t, json.Unmarshal(next(t, dl).Data, &rec))
	if len(rec.Body) != inbox.MaxDeadLetterBody {
		t.Fatalf("dead-letter body is %d bytes, want %d", len(rec.Body), inbox.MaxDeadLetterBody)
	}
}

func TestProjectIsolation(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	_, _, w := e.reported("A")

	if es := e.list("B", inbox.ListQuery{AgentID: "a", State: inbox.StateAll}); len(es) != 0 {
		t.Fatalf("project B lists A's entries: %+v", es)
	}
	if _, err := e.client.Get(ctx, "B", w.InboxID); !errors.Is(err, inbox.ErrNotFound) {
		t.Fatalf("get in B = %v, want inbox.ErrNotFound", err)
	}
	_, err := e.client.Ack(ctx, "B", w.InboxID)
	if !errors.Is(err, inbox.ErrNotFound) || !strings.Contains(err.Error(), w.InboxID) {
		t.Fatalf("ack in B = %v, want inbox.ErrNotFound naming %s", err, w.InboxID)
	}
	if got, err := e.client.SetEpoch(ctx, "B", "t", 9); err != nil || got != 9 {
		t.Fatalf("set_epoch in B = %d, %v", got, err)
	}
	if es := e.list("A", inbox.ListQuery{AgentID: "a"}); len(es) != 1 || es[0].State != inbox.StatePending {
		t.Fatalf("A's entry after B's calls: %+v", es)
	}
}

func TestRestartKeepsEntriesAndDedupe(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	wk, c, w := e.reported("p1")

	// A second process cannot open the file while the first runs.
	if _, err := boltinbox.Open(e.path, 50*time.Millisecond); !errors.Is(err, boltinbox.ErrLocked) || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("second open = %v, want boltinbox.ErrLocked", err)
	}

	e.stop()
	must(t, e.svc.Stop(ctx)) // idempotent
	if _, err := e.svc.List(ctx, "p1", inbox.ListQuery{AgentID: "a"}); !errors.Is(err, inbox.ErrClosed) {
		t.Fatalf("local list after stop = %v, want inbox.ErrClosed", err)
	}
	if _, err := e.client.List(ctx, "p1", inbox.ListQuery{AgentID: "a"}); !errors.Is(err, svc.ErrUnavailable) {
		t.Fatalf("client list after stop = %v, want svc.ErrUnavailable", err)
	}
	if err := e.svc.Start(ctx); !errors.Is(err, inbox.ErrClosed) {
		t.Fatalf("start after stop = %v, want inbox.ErrClosed", err)
	}
	must(t, boltinbox.Check(e.path))
	e.start()

	es := e.list("p1", inbox.ListQuery{AgentID: "a"})
	if len(es) != 1 || es[0].InboxID != w.InboxID {
		t.Fatalf("entries after restart = %+v", es)
	}
	c2 := e.putResult("p1", "a", "t", "k2", 0)
	e.publish("p1", c.report(), "") // duplicate of the first
	e.publish("p1", c2.report(), "")
	if w2 := decodeWakeup(t, next(t, wk)); w2.ToolCallID != "k2" {
		t.Fatalf("wakeup after restart is for %s, want k2 (the duplicate wakes no one)", w2.ToolCallID)
	}
	e.settle()
	if n := pendingCount(t, wk); n != 0 {
		t.Fatalf("%d extra wakeups", n)
	}
	if es := e.list("p1", inbox.ListQuery{AgentID: "a", State: inbox.StateAll}); len(es) != 2 || es[0].ToolCallID != "k" || es[1].ToolCallID != "k2" {
		t.Fatalf("entries = %+v, want k then k2", es)
	}
}

func TestClientErrorsMapToSentinels(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	_, _, w := e.reported("p1")

	unknown := card.NewID()
	cases := []struct {
		name string
		err  error
		want error
		says string
	}{
		{"get unknown", second(e.client.Get(ctx, "p1", unknown)), inbox.ErrNotFound, unknown},
		{"get malformed id", second(e.client.Get(ctx, "p1", "nope")), inbox.ErrInvalid, "inbox_id"},
		{"list without agent", second(e.client.List(ctx, "p1", inbox.ListQuery{})), inbox.ErrInvalid, "agent_id is required"},
		{"list bad state", second(e.client.List(ctx, "p1", inbox.ListQuery{AgentID: "a", State: "done"})), inbox.ErrInvalid, "state"},
		{"list negative limit", second(e.client.List(ctx, "p1", inbox.ListQuery{AgentID: "a", Limit: -1})), inbox.ErrInvalid, "limit"},
		{"list unknown cursor", second(e.client.List(ctx, "p1", inbox.ListQuery{AgentID: "a", After: unknown})), inbox.ErrNotFound, unknown},
		{"list a call without its turn", second(e.client.List(ctx, "p1", inbox.ListQuery{AgentID: "a", ToolCallID: "c"})), inbox.ErrInvalid, "tool_call_id needs agent_turn_id"},
		{"ack unknown", second(e.client.Ack(ctx, "p1", w.InboxID, unknown)), inbox.ErrNotFound, unknown},
		{"ack empty", second(e.client.Ack(ctx, "p1")), inbox.ErrInvalid, "empty"},
		{"set_epoch negative", second(e.client.SetEpoch(ctx, "p1", "t", -1)), inbox.ErrInvalid, "negative"},
		{"set_epoch no turn", second(e.client.SetEpoch(ctx, "p1", "", 1)), inbox.ErrInvalid, "agent_turn_id"},
		{"bad project", second(e.client.List(ctx, "p.1", inbox.ListQuery{AgentID: "a"})), inbox.ErrInvalid, "project_id"},
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, tc.want) || !strings.Contains(tc.err.Error(), tc.says) {
			t.Errorf("%s: err = %v, want %v saying %q", tc.name, tc.err, tc.want, tc.says)
		}
	}
	// A failed ack changes nothing, not even the known id.
	if es := e.list("p1", inbox.ListQuery{AgentID: "a"}); len(es) != 1 {
		t.Fatalf("pending after failed ack = %+v", es)
	}
	// A malformed request body is a bad request, mapped to inbox.ErrInvalid.
	msg, err := e.nc.Request("cg."+ver+".p1.c1.svc.inbox.list", []byte("{nope"), 5*time.Second)
	if err != nil || !strings.Contains(string(msg.Data), `"code":"bad_request"`) {
		t.Fatalf("malformed body: %v %s", err, msg.Data)
	}
	msg, err = e.nc.Request("cg."+ver+".p1.c1.svc.inbox.set_epoch", []byte(`{"agent_turn_id":"t"}`), 5*time.Second)
	if err != nil || !strings.Contains(string(msg.Data), "turn_epoch is required") {
		t.Fatalf("set_epoch without epoch: %v %s", err, msg.Data)
	}
}

func TestListPagesInCreationOrder(t *testing.T) {
	e := newEnv(t, 8)
	ctx := context.Background()
	wk := e.wakeups("p1", "a")
	const n = 25
	for i := 0; i < n; i++ {
		c := e.putResult("p1", "a", "t", "call-"+string(rune('a'+i)), 0)
		e.publish("p1", c.report(), "")
	}
	for i := 0; i < n; i++ {
		next(t, wk)
	}
	e.settle()
	all := e.list("p1", inbox.ListQuery{AgentID: "a"})
	if len(all) != n {
		t.Fatalf("%d entries, want %d", len(all), n)
	}
	var paged []inbox.Entry
	q := inbox.ListQuery{AgentID: "a", Limit: 10}
	for {
		page := e.list("p1", q)
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		q.After = page[len(page)-1].InboxID
	}
	if len(paged) != n {
		t.Fatalf("paged %d entries, want %d", len(paged), n)
	}
	for i := range all {
		if paged[i].InboxID != all[i].InboxID {
			t.Fatalf("page order differs at %d", i)
		}
		if i > 0 && all[i].CreatedAt.Before(all[i-1].CreatedAt) {
			t.Fatalf("entries not in creation order at %d", i)
		}
	}
	ids := make([]string, 0, n)
	for _, en := range all {
		ids = append(ids, en.InboxID)
	}
	if got, err := e.client.Ack(ctx, "p1", ids...); err != nil || got != n {
		t.Fatalf("ack all = %d, %v", got, err)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	e := newEnv(t, 0)
	for name, cfg := range map[string]Config{
		"no store":          {Backend: e.db},
		"no backend":        {Store: e.store},
		"bad version":       {Store: e.store, Backend: e.db, Version: "v.1"},
		"negative":          {Store: e.store, Backend: e.db, Concurrency: -1},
		"negative ack wait": {Store: e.store, Backend: e.db, AckWait: -time.Second},
	} {
		if _, err := New(e.nc, cfg); !errors.Is(err, inbox.ErrInvalid) {
			t.Errorf("%s: err = %v, want inbox.ErrInvalid", name, err)
		}
	}
	if _, err := New(nil, Config{Store: e.store, Backend: e.db}); !errors.Is(err, inbox.ErrInvalid) {
		t.Errorf("nil conn: err = %v", err)
	}
}

// TestStopLeavesTheBackendToItsOwner: Stop ends the service (its local
// methods fail with inbox.ErrClosed) but does not close the backend, which
// the caller opened and closes; a new service on the same backend sees the
// entries.
func TestStopLeavesTheBackendToItsOwner(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	_, _, w := e.reported("p1")

	must(t, e.svc.Stop(ctx))
	if _, err := e.svc.Get(ctx, "p1", w.InboxID); !errors.Is(err, inbox.ErrClosed) {
		t.Fatalf("service get after stop = %v, want inbox.ErrClosed", err)
	}
	if _, err := e.svc.Pending(); !errors.Is(err, inbox.ErrClosed) {
		t.Fatalf("service pending after stop = %v, want inbox.ErrClosed", err)
	}
	if got, err := e.db.Get(ctx, "p1", w.InboxID); err != nil || got.State != inbox.StatePending {
		t.Fatalf("backend get after the service stopped = %+v, %v; want the pending entry", got, err)
	}

	again, err := New(e.nc, e.cfg)
	must(t, err)
	must(t, again.Start(ctx))
	e.svc = again // stopped (and the file closed) by the env's cleanup
	if n, err := again.Ack(ctx, "p1", w.InboxID); err != nil || n != 1 {
		t.Fatalf("ack through a new service on the same backend = %d, %v", n, err)
	}
}

func second[T any](_ T, err error) error {
	if err == nil {
		return errors.New("no error")
	}
	return err
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	must(t, err)
	return b
}

// flakyStore fails the first Get calls as an unavailable store would.
type flakyStore struct {
	cardstore.Store
	failures atomic.Int32
	calls    atomic.Int32
}

func (f *flakyStore) Get(ctx context.Context, project, id string) (*card.Card, error) {
	f.calls.Add(1)
	if f.failures.Add(-1) >= 0 {
		return nil, errors.New("store unavailable")
	}
	return f.Store.Get(ctx, project, id)
}

func TestStoreUnavailableIsRetried(t *testing.T) {
	e := newEnv(t, 0)
	e.stop()
	flaky := &flakyStore{Store: e.store}
	flaky.failures.Store(2)
	e.cfg.Store = flaky
	e.start()
	dl := e.deadLetters()
	wk := e.wakeups("p1", "a")
	c := e.putResult("p1", "a", "t", "k", 0)
	e.publish("p1", c.report(), "")
	if w := decodeWakeup(t, next(t, wk)); w.ToolCallID != "k" {
		t.Fatalf("wakeup = %+v", w)
	}
	e.settle()
	if n := flaky.calls.Load(); n != 3 {
		t.Fatalf("store Get called %d times, want 3 (two failures, then success)", n)
	}
	if n := pendingCount(t, dl); n != 0 {
		t.Fatalf("%d dead letters for a transient failure", n)
	}
}
