package webui

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/internal/meshtest"
)

// TestHubOverflow: a stream that cannot take more events is marked, not
// blocked, and the other streams still get every event.
func TestHubOverflow(t *testing.T) {
	h := newHub(nil, "demo", "", "", slog.New(slog.NewTextHandler(io.Discard, nil)))
	slow, _ := h.join()
	fast, _ := h.join()
	for range clientBuffer + 1 {
		h.publish(Event{Turn: "t", Kind: "call"})
		<-fast.ch
	}
	if !slow.lost.Load() || len(slow.ch) != clientBuffer {
		t.Fatalf("slow stream: lost %v with %d queued; want lost with %d", slow.lost.Load(), len(slow.ch), clientBuffer)
	}
	if fast.lost.Load() {
		t.Fatal("the stream that kept up is marked lost")
	}
}

// subscribed is how many subscriptions the hub holds.
func (h *hub) subscribed() int {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	return len(h.subs)
}

// TestEventsResync: a stream that lost events sends "resync" before the
// next event, so the page re-reads what it shows. The hub subscribes only
// while a stream is open.
func TestEventsResync(t *testing.T) {
	nc := meshtest.Conn(t, meshtest.NATS(t))
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "cards.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := New(Config{Store: st, Conn: nc, Project: "demo", Open: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s)
	defer srv.Close()
	if n := s.hub.subscribed(); n != 0 {
		t.Fatalf("the hub holds %d subscriptions with no stream open, want 0", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	next := func() string {
		t.Helper()
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				return v
			}
		}
		t.Fatalf("stream ended: %v", sc.Err())
		return ""
	}
	if ev := next(); ev != "hello" {
		t.Fatalf("first event %q, want hello", ev)
	}
	s.hub.mu.Lock()
	for c := range s.hub.clients {
		c.lost.Store(true)
	}
	s.hub.mu.Unlock()
	s.hub.publish(Event{Turn: "t", Kind: "result"})
	if a, b := next(), next(); a != "resync" || b != "turn" {
		t.Fatalf("events %q, %q; want resync, then turn", a, b)
	}
	if n := s.hub.subscribed(); n != 2 {
		t.Fatalf("the hub holds %d subscriptions with a stream open, want 2 (commands, reports)", n)
	}
	s.Close()
	if n := s.hub.subscribed(); n != 0 {
		t.Fatalf("the hub holds %d subscriptions after Close, want 0", n)
	}
	for sc.Scan() { // Close ends the stream
	}
}

// TestHubSubscribesWhileWatched: the first stream subscribes the hub, the
// last one to leave unsubscribes it, and a command published while a
// stream is open reaches it.
func TestHubSubscribesWhileWatched(t *testing.T) {
	nc := meshtest.Conn(t, meshtest.NATS(t))
	h, err := startHub(nc, "v1", "demo", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	a, err := h.join()
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.join()
	if err != nil {
		t.Fatal(err)
	}
	if n := h.subscribed(); n != 2 {
		t.Fatalf("%d subscriptions with two streams, want 2", n)
	}
	if err := nc.Publish("cg.v1.demo.main.cmd.tool.echo", []byte(`{"agent_turn_id":"t1","tool_call_id":"c1"}`)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*client{a, b} {
		if ev := <-c.ch; ev.Turn != "t1" || ev.Kind != "call" || ev.ToolCallID != "c1" {
			t.Fatalf("event %+v, want the call c1 of turn t1", ev)
		}
	}
	h.leave(a)
	if n := h.subscribed(); n != 2 {
		t.Fatalf("%d subscriptions with one stream left, want 2", n)
	}
	h.leave(b)
	if n := h.subscribed(); n != 0 {
		t.Fatalf("%d subscriptions with no stream, want 0", n)
	}
	if _, err := h.join(); err != nil || h.subscribed() != 2 {
		t.Fatalf("a stream after the last left: err %v, %d subscriptions; want 2", err, h.subscribed())
	}
}
