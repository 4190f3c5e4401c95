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
	h := &hub{project: "demo", log: slog.New(slog.NewTextHandler(io.Discard, nil)), done: make(chan struct{}), clients: map[*client]struct{}{}}
	slow, fast := h.join(), h.join()
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

// TestEventsResync: a stream that lost events sends "resync" before the
// next event, so the page re-reads what it shows.
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
	s.Close()
	for sc.Scan() { // Close ends the stream
	}
}
