package boltstore_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// outboxCalls lists the tool_call_ids of the store's outbox entries
// stored at or after since.
func outboxCalls(t *testing.T, s *boltstore.Store, since time.Time) []string {
	t.Helper()
	var calls []string
	if err := s.Outbox(t.Context(), since, func(e boltstore.OutboxEntry) error {
		calls = append(calls, e.ToolCallID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return calls
}

// TestOutbox: a call's command is stored with its tool.call card and
// deleted with its result; a repeat of the card stores nothing new; the
// entry keeps the message as given; DeleteTurn deletes the turn's
// entries; a reopened file has them.
func TestOutbox(t *testing.T) {
	ctx := t.Context()
	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s, path := openStore(t, boltstore.WithClock(clock))
	msg := boltstore.Message{Subject: "cg.v1r3.p.c.cmd.tool.echo", Header: map[string][]string{"Nats-Msg-Id": {"m-1"}}, Data: []byte(`{"x":1}`)}

	a := storetest.ToolCallCard("p", "turn-1", "call-a")
	if err := s.PutWithCommand(ctx, a, msg); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	b := storetest.ToolCallCard("p", "turn-1", "call-b")
	if err := s.PutWithCommand(ctx, b, msg); err != nil {
		t.Fatal(err)
	}
	other := storetest.ToolCallCard("p", "turn-2", "call-c")
	if err := s.PutWithCommand(ctx, other, msg); err != nil {
		t.Fatal(err)
	}
	var got []boltstore.OutboxEntry
	if err := s.Outbox(ctx, time.Time{}, func(e boltstore.OutboxEntry) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ToolCallID != "call-a" || got[0].AgentTurnID != "turn-1" || got[0].ProjectID != "p" ||
		got[0].Message.Subject != msg.Subject || string(got[0].Message.Data) != string(msg.Data) ||
		got[0].Message.Header["Nats-Msg-Id"][0] != "m-1" || !got[0].At.Equal(now.Add(-time.Minute)) {
		t.Fatalf("outbox = %+v, want the three calls with the message as given", got)
	}
	if calls := outboxCalls(t, s, now); len(calls) != 2 {
		t.Fatalf("entries since %v = %q, want call-b and call-c", now, calls)
	}

	// A repeat of the card's bytes is a no-op; other bytes conflict.
	if err := s.PutWithCommand(ctx, a, msg); err != nil {
		t.Fatalf("repeat: %v", err)
	}
	changed := storetest.ToolCallCard("p", "turn-1", "call-a")
	changed.CardID = a.CardID
	changed.Content = []byte(`{"tool_name":"other","arguments":{}}`)
	if err := s.PutWithCommand(ctx, changed, msg); !errors.Is(err, cardstore.ErrConflict) {
		t.Fatalf("other bytes: err = %v, want ErrConflict", err)
	}

	// The result deletes the entry in its commit.
	if err := s.Put(ctx, storetest.ToolResultCard("p", "turn-1", "call-a", card.StatusSuccess)); err != nil {
		t.Fatal(err)
	}
	if calls := outboxCalls(t, s, time.Time{}); len(calls) != 2 || calls[0] != "call-b" {
		t.Fatalf("after call-a's result: outbox = %q, want call-b and call-c", calls)
	}
	// A card whose call has a result already gets no entry.
	late := storetest.ToolCallCard("p", "turn-1", "call-a")
	late.CardID = "0b1c2d3e-4f50-4a6b-8c7d-8e9fa0b1c2d3"
	if err := s.PutWithCommand(ctx, late, msg); err != nil {
		t.Fatal(err)
	}
	if n, err := s.OutboxLen(ctx); err != nil || n != 2 {
		t.Fatalf("OutboxLen = %d, %v; want 2", n, err)
	}

	if _, err := s.DeleteTurn(ctx, "p", "turn-2"); err != nil {
		t.Fatal(err)
	}
	if calls := outboxCalls(t, s, time.Time{}); len(calls) != 1 || calls[0] != "call-b" {
		t.Fatalf("after DeleteTurn(turn-2): outbox = %q, want call-b", calls)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkFile(t, path)
	s2, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if calls := outboxCalls(t, s2, time.Time{}); len(calls) != 1 || calls[0] != "call-b" {
		t.Fatalf("reopened: outbox = %q, want call-b", calls)
	}
}

// TestPutWithCommandRefuses: only a tool.call card of a turn with a
// command subject.
func TestPutWithCommandRefuses(t *testing.T) {
	ctx := t.Context()
	s, _ := openStore(t)
	msg := boltstore.Message{Subject: "cg.v1r3.p.c.cmd.tool.echo"}
	for name, c := range map[string]*card.Card{
		"result": storetest.ToolResultCard("p", "t", "c", card.StatusSuccess),
		"nil":    nil,
	} {
		if err := s.PutWithCommand(ctx, c, msg); !errors.Is(err, cardstore.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if err := s.PutWithCommand(ctx, storetest.ToolCallCard("p", "t", "c"), boltstore.Message{}); !errors.Is(err, cardstore.ErrInvalid) {
		t.Errorf("no subject: err = %v, want ErrInvalid", err)
	}
	if n, err := s.OutboxLen(ctx); err != nil || n != 0 {
		t.Fatalf("OutboxLen = %d, %v; want 0", n, err)
	}
}

// TestUpgradeV2AddsOutbox: a schema version 2 file (no outbox bucket)
// opens as version 3 with an empty outbox and its cards kept.
func TestUpgradeV2AddsOutbox(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "cards.db")
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	call := storetest.ToolCallCard("p", "turn-1", "call-1")
	if err := s.Put(ctx, call); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	downgrade(t, path, "2", "outbox")
	s, err = boltstore.Open(path)
	if err != nil {
		t.Fatalf("open a version 2 file: %v", err)
	}
	if _, err := s.Get(ctx, "p", call.CardID); err != nil {
		t.Fatalf("card of the version 2 file: %v", err)
	}
	if err := s.PutWithCommand(ctx, storetest.ToolCallCard("p", "turn-1", "call-2"), boltstore.Message{Subject: "s"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkFile(t, path)
}
