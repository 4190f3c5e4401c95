package holder_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/holder"
)

var spec = holder.Spec{Service: "svc", Project: "_svc", Key: "svc/state", File: "svc-state.db", FlagHint: "utpmesh worker --svc-state jetstream|bolt svc"}

// One holder at a time: a second process's Take and a replicated
// worker's CheckFree are refused naming the holder and what to do; the
// same host and data directory take a lease over (the earlier process is
// gone); after Release the lease is free.
func TestLease(t *testing.T) {
	ctx := context.Background()
	cards, err := boltstore.Open(filepath.Join(t.TempDir(), "cards.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cards.Close() })
	if err := holder.CheckFree(ctx, cards, spec); err != nil {
		t.Fatalf("no lease yet: %v", err)
	}
	dir := t.TempDir()
	h, err := holder.Take(ctx, cards, spec, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = holder.CheckFree(ctx, cards, spec)
	if !errors.Is(err, state.ErrModeMismatch) || !strings.Contains(err.Error(), "served from its local file (svc-state.db) by pid") || !strings.Contains(err.Error(), spec.FlagHint) {
		t.Fatalf("CheckFree beside a holder = %v", err)
	}
	if _, err := holder.Take(ctx, cards, spec, t.TempDir(), nil); !errors.Is(err, holder.ErrHeld) || !strings.Contains(err.Error(), "is held by pid") {
		t.Fatalf("a second holder elsewhere = %v, want ErrHeld naming the holder", err)
	}
	// The same place again: a restart after a crash takes over.
	h2, err := holder.Take(ctx, cards, spec, dir, nil)
	if err != nil {
		t.Fatalf("take-over at the same place: %v", err)
	}
	h.Release() // the old lease is gone already: no harm
	h2.Release()
	h2.Release()
	if err := holder.CheckFree(ctx, cards, spec); err != nil {
		t.Fatalf("after Release: %v", err)
	}
}

// A Spec with the modes' flags has CheckFree's refusal name them.
func TestCheckFreeNamesTheFlags(t *testing.T) {
	ctx := context.Background()
	cards, err := boltstore.Open(filepath.Join(t.TempDir(), "cards.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cards.Close() })
	flagged := spec
	flagged.LocalFlag, flagged.SharedFlag = "--svc-state bolt", "--svc-state jetstream"
	h, err := holder.Take(ctx, cards, flagged, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	err = holder.CheckFree(ctx, cards, flagged)
	for _, want := range []string{"start this one with --svc-state bolt on that host", "start every svc worker with --svc-state jetstream", flagged.FlagHint} {
		if !errors.Is(err, state.ErrModeMismatch) || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckFree = %v; want ErrModeMismatch saying %q", err, want)
		}
	}
}
