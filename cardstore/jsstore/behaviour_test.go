package jsstore_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/jsstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/embednats"
)

// TestCrashMidBatch: a writer that dies after sending part of a Put's
// batch (here: the card and its turn index record, without the commit)
// leaves nothing visible, and the same Put through a store then succeeds
// once. The subjects are the documented layout.
func TestCrashMidBatch(t *testing.T) {
	ns := startServer(t, "")
	stream := newStream()
	s := open(t, connect(t, ns), jsstore.Config{Stream: stream})
	const p = "proj-crash"
	c := storetest.ToolCallCard(p, "turn-1", "call-1")
	data, err := card.Encode(c)
	if err != nil {
		t.Fatal(err)
	}

	dying, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	turnTok := base64.RawURLEncoding.EncodeToString([]byte("turn-1"))
	for i, m := range []*nats.Msg{
		{Subject: stream + ".c." + p + "." + c.CardID, Data: data},
		{Subject: stream + ".t." + p + "." + turnTok, Data: []byte(`{"ids":["` + c.CardID + `"]}`)},
	} {
		m.Header = nats.Header{}
		m.Header.Set("Nats-Batch-Id", "crashed-writer")
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if err := dying.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := dying.Flush(); err != nil {
		t.Fatal(err)
	}
	dying.Close() // the writer is gone; its batch never commits

	ctx := t.Context()
	if _, err := s.Get(ctx, p, c.CardID); !errors.Is(err, cardstore.ErrNotFound) {
		t.Fatalf("get a card of an uncommitted batch: %v, want ErrNotFound", err)
	}
	page, err := s.ListTurn(ctx, cardstore.ListTurnRequest{ProjectID: p, AgentTurnID: "turn-1"})
	if err != nil || len(page.Cards) != 0 {
		t.Fatalf("turn of an uncommitted batch: %d cards, %v; want none", len(page.Cards), err)
	}
	turns, err := s.ListTurns(ctx, cardstore.ListTurnsRequest{ProjectID: p})
	if err != nil || len(turns.Turns) != 0 {
		t.Fatalf("turns after an uncommitted batch: %+v, %v; want none", turns, err)
	}
	if err := s.Put(ctx, c); err != nil {
		t.Fatalf("put after a crashed writer's batch: %v", err)
	}
	all, err := cardstore.AllTurn(ctx, s, p, "turn-1")
	if err != nil || len(all) != 1 || all[0].CardID != c.CardID {
		t.Fatalf("turn after the put: %d cards, %v; want exactly the one card", len(all), err)
	}
}

// TestSharedStream: two stores on one stream, each with its own
// connection (two processes of a cluster), are one CardStore: results,
// claims and new turns written concurrently through both obey every rule.
func TestSharedStream(t *testing.T) {
	ns := startServer(t, "")
	stream := newStream()
	a := open(t, connect(t, ns), jsstore.Config{Stream: stream})
	b := open(t, connect(t, ns), jsstore.Config{Stream: stream})
	ctx := t.Context()
	const p = "proj-shared"

	call := storetest.ToolCallCard(p, "turn-0", "call-0")
	if err := a.Put(ctx, call); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, p, call.CardID); err != nil {
		t.Fatalf("card written through a, read through b: %v", err)
	}

	const racers, turnsEach = 8, 12
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]*card.Card, 2*racers)
	resultErrs := make([]error, 2*racers)
	turnErrs := make(chan error, 2*turnsEach)
	for i := range 2 * racers {
		s := []*jsstore.Store{a, b}[i%2]
		results[i] = storetest.ToolResultCard(p, "turn-0", "call-0", card.StatusSuccess)
		wg.Go(func() {
			<-start
			resultErrs[i] = s.Put(ctx, results[i])
		})
	}
	for i, s := range []*jsstore.Store{a, b} {
		wg.Go(func() {
			<-start
			for j := range turnsEach {
				turn := fmt.Sprintf("turn-%d-%d", i, j)
				if err := s.Put(ctx, storetest.ToolCallCard(p, turn, "c"), storetest.ToolResultCard(p, turn, "c", card.StatusSuccess)); err != nil {
					turnErrs <- fmt.Errorf("store %d, %s: %w", i, turn, err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(turnErrs)
	for err := range turnErrs {
		t.Error(err)
	}
	var winner *card.Card
	for i, err := range resultErrs {
		switch {
		case err == nil && winner == nil:
			winner = results[i]
		case err == nil:
			t.Fatalf("two results of one call accepted through two stores: %s and %s", winner.CardID, results[i].CardID)
		case !errors.Is(err, cardstore.ErrResultExists):
			t.Fatalf("racing result %d: %v, want nil or ErrResultExists", i, err)
		}
	}
	if winner == nil {
		t.Fatal("no racing result was accepted")
	}
	for _, s := range []*jsstore.Store{a, b} {
		got, err := s.FindToolResult(ctx, p, "turn-0", "call-0")
		if err != nil || got.CardID != winner.CardID {
			t.Fatalf("result after the race: %v, %v; want %s", got, err, winner.CardID)
		}
	}
	all := listTurns(t, b, p)
	if len(all) != 1+2*turnsEach {
		t.Fatalf("turns through b: %d, want %d", len(all), 1+2*turnsEach)
	}
	for _, ti := range all {
		if ti.AgentTurnID != "turn-0" && (ti.Cards != 2 || ti.ToolCalls != 1 || ti.ToolResults != 1) {
			t.Errorf("turn %s = %+v, want 1 call and 1 result", ti.AgentTurnID, ti)
		}
	}

	key := "k/shared"
	if _, err := a.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: key, Holder: "worker-a", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	_, err := b.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: key, Holder: "worker-b", Lease: time.Minute})
	var held *cardstore.ClaimHeldError
	if !errors.As(err, &held) || held.Holder != "worker-a" {
		t.Fatalf("claim through b of a key a holds: %v, want ErrClaimHeld by worker-a", err)
	}
}

// listTurns returns every turn of the project, newest first.
func listTurns(t *testing.T, s cardstore.Store, project string) []cardstore.TurnInfo {
	t.Helper()
	var out []cardstore.TurnInfo
	req := cardstore.ListTurnsRequest{ProjectID: project, Limit: 5}
	for {
		page, err := s.ListTurns(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Turns...)
		if page.Next == 0 {
			return out
		}
		req.Before = page.Next
	}
}

// TestIDTokens: ids that hold dots, wildcards, white space, slashes or
// non-ASCII letters map to subject tokens one way only: every turn, call,
// agent and claim key below stays separate.
func TestIDTokens(t *testing.T) {
	ns := startServer(t, "")
	s := open(t, connect(t, ns), jsstore.Config{})
	ctx := t.Context()
	const p = "proj-tokens"
	ids := []string{"a", "a.b", "a.*", "a.>", ">", "*", "a b", "a/b", "b/c", "a\tb", "ü", "a.b.c", strings.Repeat("z", card.MaxIDLen)}
	for i, turn := range ids {
		call := ids[len(ids)-1-i]
		c := storetest.ToolCallCard(p, turn, call)
		c.Metadata.AgentID = turn
		if err := s.Put(ctx, c, storetest.ToolResultCard(p, turn, call, card.StatusSuccess)); err != nil {
			t.Fatalf("put turn %q call %q: %v", turn, call, err)
		}
	}
	for i, turn := range ids {
		call := ids[len(ids)-1-i]
		all, err := cardstore.AllTurn(ctx, s, p, turn)
		if err != nil || len(all) != 2 {
			t.Fatalf("turn %q: %d cards, %v; want its 2", turn, len(all), err)
		}
		for _, c := range all {
			if c.Metadata.AgentTurnID != turn {
				t.Fatalf("turn %q lists a card of turn %q", turn, c.Metadata.AgentTurnID)
			}
		}
		res, err := s.FindToolResult(ctx, p, turn, call)
		if err != nil || res.Metadata.AgentTurnID != turn || res.ToolCallID != call {
			t.Fatalf("result of %q/%q: %v, %v", turn, call, res, err)
		}
		mine, err := s.ListTurns(ctx, cardstore.ListTurnsRequest{ProjectID: p, AgentID: turn})
		if err != nil || len(mine.Turns) != 1 || mine.Turns[0].AgentTurnID != turn {
			t.Fatalf("turns of agent %q: %+v, %v; want only turn %q", turn, mine, err, turn)
		}
		if _, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: "x." + turn, Holder: turn, Lease: time.Minute}); err != nil {
			t.Fatalf("claim of key %q: %v (keys that differ must not share a claim)", "x."+turn, err)
		}
	}
	if n := len(listTurns(t, s, p)); n != len(ids) {
		t.Fatalf("%d turns listed, want %d", n, len(ids))
	}
}

// TestServerBatchLimit: on a server with nats-server's default
// max_batch_size (1000, as meshtest and embednats start it), a Put that
// needs a bigger batch fails with ErrTooLarge saying what to change, and
// stores nothing; the biggest Put the documentation promises to fit does.
func TestServerBatchLimit(t *testing.T) {
	srv := meshtest.NATS(t)
	s := open(t, meshtest.Conn(t, srv), jsstore.Config{})
	ctx := t.Context()
	const p = "proj-limit"
	big := make([]*card.Card, cardstore.MaxBatch)
	for i := range big {
		big[i] = storetest.ToolCallCard(p, "turn-big", fmt.Sprintf("call-%d", i))
	}
	err := s.Put(ctx, big...)
	if !errors.Is(err, cardstore.ErrTooLarge) || !strings.Contains(err.Error(), "max_batch_size") {
		t.Fatalf("put of %d cards of one turn on a default server: %v, want ErrTooLarge naming max_batch_size", len(big), err)
	}
	if _, err := s.Get(ctx, p, big[0].CardID); !errors.Is(err, cardstore.ErrNotFound) {
		t.Fatalf("card of the refused put: %v, want ErrNotFound", err)
	}
	if err := s.Put(ctx, big[:996]...); err != nil {
		t.Fatalf("put of 996 cards of one turn (documented to fit): %v", err)
	}
}

// TestRestart: everything acknowledged survives a restart of the server,
// and a new store on the stream carries on (fencing tokens keep growing).
func TestRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "jetstream")
	stream := newStream()
	const p = "proj-restart"
	call := storetest.ToolCallCard(p, "turn-1", "call-1")
	res := storetest.ToolResultCard(p, "turn-1", "call-1", card.StatusSuccess)
	key := cardstore.CallKey{AgentTurnID: "turn-1", ToolCallID: "call-1"}.String()
	var first *cardstore.Claim

	func() {
		ns := startServer(t, dir)
		defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
		s := open(t, connect(t, ns), jsstore.Config{Stream: stream})
		if err := s.Put(t.Context(), call); err != nil {
			t.Fatal(err)
		}
		var err error
		if first, err = s.Claim(t.Context(), cardstore.ClaimRequest{ProjectID: p, Key: key, Holder: "w1", Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(t.Context(), res); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateBox(t.Context(), p, "box-1", []string{call.CardID}); err != nil {
			t.Fatal(err)
		}
	}()

	ns := startServer(t, dir)
	s := open(t, connect(t, ns), jsstore.Config{Stream: stream})
	ctx := t.Context()
	all, err := cardstore.AllTurn(ctx, s, p, "turn-1")
	if err != nil || len(all) != 2 {
		t.Fatalf("turn after restart: %d cards, %v; want 2", len(all), err)
	}
	if got, err := s.FindToolResult(ctx, p, "turn-1", "call-1"); err != nil || got.CardID != res.CardID {
		t.Fatalf("result after restart: %v, %v", got, err)
	}
	if _, err := s.GetBox(ctx, p, "box-1"); err != nil {
		t.Fatalf("box after restart: %v", err)
	}
	again, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: key, Holder: "w2", Lease: time.Minute})
	if err != nil || again.Token <= first.Token || again.TakenOver {
		t.Fatalf("claim after restart = %+v, %v; want a token above %d (the result's tombstone survived)", again, err, first.Token)
	}
	if turns := listTurns(t, s, p); len(turns) != 1 || turns[0].Cards != 2 {
		t.Fatalf("turns after restart: %+v", turns)
	}
}

// TestOpenErrors: a bad configuration or a server that cannot hold the
// store is a clear error at Open, not at the first write.
func TestOpenErrors(t *testing.T) {
	ns := startServer(t, "")
	nc := connect(t, ns)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		cfg  jsstore.Config
	}{
		{"stream with a dot", jsstore.Config{Stream: "a.b"}},
		{"negative replicas", jsstore.Config{Replicas: -1}},
		{"six replicas", jsstore.Config{Replicas: 6}},
		{"card limit above the default", jsstore.Config{MaxCardBytes: cardstore.DefaultMaxCardBytes + 1}},
		{"negative timeout", jsstore.Config{RequestTimeout: -time.Second}},
	} {
		if _, err := jsstore.Open(ctx, nc, tc.cfg); !errors.Is(err, cardstore.ErrInvalid) {
			t.Errorf("open with %s: %v, want ErrInvalid", tc.name, err)
		}
	}
	if _, err := jsstore.Open(ctx, nil, jsstore.Config{}); !errors.Is(err, cardstore.ErrInvalid) {
		t.Errorf("open without a connection: %v, want ErrInvalid", err)
	}
	_, err := jsstore.Open(ctx, nc, jsstore.Config{Stream: newStream(), Replicas: 3})
	if err == nil || !strings.Contains(err.Error(), "cluster") {
		t.Errorf("open with 3 replicas on one server: %v, want an error that asks for a cluster", err)
	}

	noJS, err := embednats.Start(embednats.Config{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = noJS.Shutdown(t.Context()) })
	nc2, err := noJS.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc2.Close)
	if _, err := jsstore.Open(ctx, nc2, jsstore.Config{}); !errors.Is(err, jsstore.ErrUnsupported) {
		t.Errorf("open on a server without JetStream: %v, want ErrUnsupported", err)
	}
}

// TestClosed: every method of a closed store fails with ErrClosed.
func TestClosed(t *testing.T) {
	ns := startServer(t, "")
	s := open(t, connect(t, ns), jsstore.Config{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	ctx := t.Context()
	const p = "proj-closed"
	errOf := func(_ any, err error) error { return err }
	for name, err := range map[string]error{
		"Put":       s.Put(ctx, storetest.NoteCard(p, "t", "x")),
		"Get":       errOf(s.Get(ctx, p, card.NewID())),
		"ListTurns": errOf(s.ListTurns(ctx, cardstore.ListTurnsRequest{ProjectID: p})),
		"Claim":     errOf(s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: "k", Holder: "h", Lease: time.Minute})),
		"GetBox":    errOf(s.GetBox(ctx, p, "b")),
	} {
		if !errors.Is(err, cardstore.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

// TestStreamAnswersLate: a write or read that no server answers at first
// (the stream is not known to the connection's server yet, as right after
// it was created through another node of a cluster) is asked again, and
// succeeds once the stream answers, even after more than nats.go's own
// half-second of publish retries. CI once failed TestConformanceR3 with
// "no response from stream" on every racing claim this way.
func TestStreamAnswersLate(t *testing.T) {
	ns := startServer(t, "")
	nc := connect(t, ns)
	stream := newStream()
	s := open(t, nc, jsstore.Config{Stream: stream})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := js.DeleteStream(ctx, stream); err != nil {
		t.Fatal(err)
	}
	recreated := make(chan error, 1)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		_, err := js.CreateStream(ctx, jsstore.StreamConfig(stream, 1))
		recreated <- err
	}()

	const p = "proj-late"
	call := storetest.ToolCallCard(p, "turn-1", "call-1")
	if err := s.Put(ctx, call); err != nil {
		t.Fatalf("put while the stream is away for 1.5 s: %v", err)
	}
	if err := <-recreated; err != nil {
		t.Fatal(err)
	}
	claim, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: p, Key: cardstore.CallKey{AgentTurnID: "turn-1", ToolCallID: "call-1"}.String(), Holder: "w1", Lease: time.Minute})
	if err != nil || claim.Token != 1 {
		t.Fatalf("claim after the stream came back = %+v, %v", claim, err)
	}
	if got, err := s.Get(ctx, p, call.CardID); err != nil || got.CardID != call.CardID {
		t.Fatalf("get after the stream came back = %v, %v", got, err)
	}
}
