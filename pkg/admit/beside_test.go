package admit_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/admit"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// besideStore is the single-node CardStore as the admission sees it,
// watched: it counts announcements, and a Put of a tool.call card can be
// held until the call's command is seen on its subject (so a dispatch
// that published only after the Put would never finish), or failed.
type besideStore struct {
	*boltstore.Store
	announced atomic.Int32
	holdPut   chan struct{} // when set, a tool.call Put waits for it (or ctx)
	failPut   atomic.Bool
}

func (b *besideStore) AnnouncePut(c *card.Card) func(error) {
	b.announced.Add(1)
	return b.Store.AnnouncePut(c)
}

func (b *besideStore) Put(ctx context.Context, cards ...*card.Card) error {
	if len(cards) == 1 && cards[0].Type == card.TypeToolCall {
		if b.failPut.Load() {
			return errors.New("the disk is gone")
		}
		if b.holdPut != nil {
			select {
			case <-b.holdPut:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return b.Store.Put(ctx, cards...)
}

// besideMesh is an admission with PublishBesideCard over a real
// nats-server, a bbolt CardStore and registry (echo registered), with a
// core subscription on echo's command subject.
type besideMesh struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	store *besideStore
	cmds  chan *nats.Msg
}

func newBesideMesh(t *testing.T, holdPut chan struct{}) *besideMesh {
	t.Helper()
	return newBesideMeshWith(t, holdPut, false)
}

// newBesideMeshWith is newBesideMesh whose admission stores each new
// call's command in the CardStore's outbox when outbox is set.
func newBesideMeshWith(t *testing.T, holdPut chan struct{}, outbox bool) *besideMesh {
	t.Helper()
	ctx := t.Context()
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(ctx, js, subjects.DefaultVersion); err != nil {
		t.Fatal(err)
	}
	files := openAdmitFiles(ctx, t, true)
	cards, reg, key := files.cards, files.reg, files.key
	m := &besideMesh{nc: nc, js: js, store: &besideStore{Store: cards, holdPut: holdPut}, cmds: make(chan *nats.Msg, 16)}
	sub, err := nc.Subscribe("cg."+subjects.DefaultVersion+".demo.main.cmd.tool.echo", func(msg *nats.Msg) {
		m.cmds <- msg
		if holdPut != nil {
			select {
			case <-holdPut:
			default:
				close(holdPut) // the command is out: the card's Put may end
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cfg := admit.Config{Store: m.store, Registry: reg, Key: key, PublishBesideCard: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if outbox {
		cfg.Outbox = func(ctx context.Context, cc *card.Card, msg *nats.Msg) error {
			return cards.PutWithCommand(ctx, cc, boltstore.Message{Subject: msg.Subject, Header: msg.Header, Data: msg.Data})
		}
	}
	s, err := admit.Start(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return m
}

func (m *besideMesh) dispatch(ctx context.Context, call, args string) (*utp.DispatchReply, error) {
	subj, err := subjects.Dispatch(subjects.DefaultVersion, "demo", "main", "a1")
	if err != nil {
		return nil, err
	}
	req := utp.DispatchRequest{AgentID: "a1", AgentTurnID: "turn-1", TurnEpoch: 1, StepID: "step-" + call,
		ToolCallID: call, ToolName: "echo", Arguments: []byte(args),
		Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	var reply utp.DispatchReply
	if err := svc.Call(ctx, m.nc, subj.String(), admit.Codes, &req, &reply); err != nil {
		return nil, err
	}
	return &reply, nil
}

// stored counts the command stream's messages of the call.
func (m *besideMesh) stored(t *testing.T, call string) int {
	t.Helper()
	return readMsgIDs(t, m.js, streams.CommandStream(subjects.DefaultVersion))[utp.Ref("demo", "turn-1", call).MsgID()]
}

// TestPublishBesideCard: a new call's command is published while its
// card's Put is still under way (the Put is held until the command is
// seen), and the dispatch answers once both are done: the card is
// stored and the command is in the stream, once, signed over the card's
// content. A resend of the admitted call and a conflicting dispatch take
// the sequential path (no announcement) and answer as without the
// option.
func TestPublishBesideCard(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	m := newBesideMesh(t, make(chan struct{}))
	reply, err := m.dispatch(ctx, "c1", `{"x":1}`)
	if err != nil || !reply.Admitted {
		t.Fatalf("dispatch of a new call = %+v, %v; want admitted (a dispatch that publishes after the card's Put never ends here)", reply, err)
	}
	cc, err := m.store.Get(ctx, "demo", reply.ToolCallCardID)
	if err != nil {
		t.Fatalf("the card of an answered dispatch: %v", err)
	}
	cmd := <-m.cmds
	var c utp.Command
	if err := json.Unmarshal(cmd.Data, &c); err != nil {
		t.Fatal(err)
	}
	adm, err := utp.CheckOwnAdmission(cmd.Header.Get(utp.HeaderAdmission), cmd.Subject, &c)
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.CheckCard(cc.Content); err != nil || adm.ToolCallCardID != cc.CardID {
		t.Fatalf("the command's admission %+v does not sign the stored card %s: %v", adm, cc.CardID, err)
	}
	if n := m.stored(t, "c1"); n != 1 {
		t.Fatalf("command stored %d times, want once", n)
	}
	if n := m.store.announced.Load(); n != 1 {
		t.Fatalf("%d announced Puts for one new call, want 1", n)
	}

	again, err := m.dispatch(ctx, "c1", `{"x":1}`)
	if err != nil || !again.Admitted || again.ToolCallCardID != reply.ToolCallCardID {
		t.Fatalf("resend of an admitted call = %+v, %v; want admitted with card %s", again, err, reply.ToolCallCardID)
	}
	if _, err := m.dispatch(ctx, "c1", `{"x":2}`); !errors.Is(err, admit.ErrConflict) {
		t.Fatalf("conflicting dispatch = %v, want admit.ErrConflict", err)
	}
	if n := m.store.announced.Load(); n != 1 {
		t.Fatalf("a resend and a conflict announced Puts (%d in all), want the sequential path", n)
	}
	if n := m.stored(t, "c1"); n != 1 {
		t.Fatalf("command stored %d times after a resend, want once", n)
	}
}

// TestPublishBesideCardOutbox: with Config.Outbox a new call's card is
// stored with the very command the admission published (subject, headers,
// body) as its outbox entry; a resend stores nothing new.
func TestPublishBesideCardOutbox(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	m := newBesideMeshWith(t, nil, true)
	reply, err := m.dispatch(ctx, "c1", `{"x":1}`)
	if err != nil || !reply.Admitted {
		t.Fatalf("dispatch = %+v, %v; want admitted", reply, err)
	}
	cmd := <-m.cmds
	var entries []boltstore.OutboxEntry
	if err := m.store.Outbox(ctx, time.Time{}, func(e boltstore.OutboxEntry) error { entries = append(entries, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("outbox has %d entries after one dispatch, want 1", len(entries))
	}
	e := entries[0]
	if e.ProjectID != "demo" || e.AgentTurnID != "turn-1" || e.ToolCallID != "c1" || e.Message.Subject != cmd.Subject ||
		string(e.Message.Data) != string(cmd.Data) {
		t.Fatalf("outbox entry %+v, want the published command on %s", e, cmd.Subject)
	}
	for _, h := range []string{jetstream.MsgIDHeader, utp.HeaderAdmission, utp.HeaderTraceparent} {
		if got := nats.Header(e.Message.Header).Get(h); got == "" || got != cmd.Header.Get(h) {
			t.Errorf("outbox entry's %s = %q, want the published %q", h, got, cmd.Header.Get(h))
		}
	}
	if _, err := m.dispatch(ctx, "c1", `{"x":1}`); err != nil {
		t.Fatal(err)
	}
	if n, err := m.store.OutboxLen(ctx); err != nil || n != 1 {
		t.Fatalf("after a resend: %d outbox entries (%v), want 1", n, err)
	}
}

// TestPublishBesideCardPutFails: when the card's Put fails the dispatch
// answers the error, the command is published without a card, and the
// announcement has ended (a StartCall finds no card).
func TestPublishBesideCardPutFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	m := newBesideMesh(t, nil)
	m.store.failPut.Store(true)
	reply, err := m.dispatch(ctx, "c1", `{}`)
	if err == nil || !strings.Contains(err.Error(), "the disk is gone") || !strings.Contains(err.Error(), "write tool.call card") {
		t.Fatalf("dispatch whose card's Put fails = %+v, %v; want the Put's error", reply, err)
	}
	if n := m.stored(t, "c1"); n != 1 {
		t.Fatalf("command stored %d times, want once (published beside the failed Put)", n)
	}
	id := admit.CallCardID("demo", "turn-1", "c1")
	res, err := m.store.StartCall(ctx, cardstore.StartCallRequest{ProjectID: "demo", AgentTurnID: "turn-1", ToolCallID: "c1",
		ToolCallCardID: id, Holder: "w1", Lease: 5 * time.Second})
	if err != nil || res.Claim == nil || res.CallCard != nil {
		t.Fatalf("StartCall of the call whose card's Put failed = %+v, %v; want a claim without a card", res, err)
	}
	// The agent sends the dispatch again: it writes the card.
	m.store.failPut.Store(false)
	if reply, err = m.dispatch(ctx, "c1", `{}`); err != nil || !reply.Admitted {
		t.Fatalf("resend after the failed Put = %+v, %v; want admitted", reply, err)
	}
	if _, err := m.store.Get(ctx, "demo", id); err != nil {
		t.Fatalf("the card after the resend: %v", err)
	}
}

// TestPublishBesideCardConcurrentResends: dispatches of one new call sent
// at once are serialized: one announces and writes the card beside its
// command, the others find the card; all are admitted with the same card
// and the command is stored once.
func TestPublishBesideCardConcurrentResends(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	m := newBesideMesh(t, nil)
	const n = 4
	replies := make([]*utp.DispatchReply, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { replies[i], errs[i] = m.dispatch(ctx, "c1", `{}`) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || !replies[i].Admitted || replies[i].ToolCallCardID != admit.CallCardID("demo", "turn-1", "c1") {
			t.Fatalf("dispatch %d = %+v, %v; want admitted", i, replies[i], errs[i])
		}
	}
	if a := m.store.announced.Load(); a != 1 {
		t.Fatalf("%d announced Puts, want 1 (the others found the card)", a)
	}
	if s := m.stored(t, "c1"); s != 1 {
		t.Fatalf("command stored %d times, want once", s)
	}
}

// TestPublishBesideCardNeedsAnnouncer: the option on a store that cannot
// be told of Puts (a remote or replicated one) is refused at Start.
func TestPublishBesideCardNeedsAnnouncer(t *testing.T) {
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	files := openAdmitFiles(t.Context(), t, false)
	cards, reg, key := files.cards, files.reg, files.key
	hidden := struct{ cardstore.Store }{cards}
	_, err := admit.Start(t.Context(), nc, admit.Config{Store: hidden, Registry: reg, Key: key, PublishBesideCard: true})
	if err == nil || !strings.Contains(err.Error(), "PublishBesideCard") {
		t.Fatalf("Start with PublishBesideCard on a store that is no CardAnnouncer = %v; want a refusal naming the option", err)
	}
}

// TestOutboxNeedsBeside: Config.Outbox without PublishBesideCard is
// refused at Start.
func TestOutboxNeedsBeside(t *testing.T) {
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	files := openAdmitFiles(t.Context(), t, false)
	_, err := admit.Start(t.Context(), nc, admit.Config{Store: files.cards, Registry: files.reg, Key: files.key,
		Outbox: func(context.Context, *card.Card, *nats.Msg) error { return nil }})
	if err == nil || !strings.Contains(err.Error(), "PublishBesideCard") {
		t.Fatalf("Start with Outbox and without PublishBesideCard = %v; want a refusal naming PublishBesideCard", err)
	}
}
