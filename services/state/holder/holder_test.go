package holder_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
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

// flaky is a real CardStore whose first fails claims fail as an
// unreachable one's do.
type flaky struct {
	cardstore.Store
	fails int
}

func (f *flaky) Claim(ctx context.Context, req cardstore.ClaimRequest) (*cardstore.Claim, error) {
	if f.fails > 0 {
		f.fails--
		return nil, errors.New("nats: no responders available for request")
	}
	return f.Store.Claim(ctx, req)
}

// TakeWith's options: Retry waits out an unreachable CardStore; a failed
// Check gives the lease up; Lost hears of a lease another process took,
// with the refusal naming it.
func TestTakeWithOptions(t *testing.T) {
	ctx := context.Background()
	cards, err := boltstore.Open(filepath.Join(t.TempDir(), "cards.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cards.Close() })

	if _, err := holder.Take(ctx, &flaky{Store: cards, fails: 1}, spec, t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "is the mesh up?") {
		t.Fatalf("Take on an unreachable CardStore = %v, want a failure", err)
	}
	h, err := holder.TakeWith(ctx, &flaky{Store: cards, fails: 3}, spec, t.TempDir(), nil, holder.Options{Retry: true})
	if err != nil {
		t.Fatalf("TakeWith(Retry) = %v", err)
	}
	h.Release()

	refused := errors.New("the bucket records the shared mode")
	if _, err := holder.TakeWith(ctx, cards, spec, t.TempDir(), nil, holder.Options{Check: func(context.Context) error { return refused }}); !errors.Is(err, refused) {
		t.Fatalf("TakeWith(Check fails) = %v, want its error", err)
	}
	if err := holder.CheckFree(ctx, cards, spec); err != nil {
		t.Fatalf("after a failed Check the lease is still held: %v", err)
	}

	short := spec
	short.Lease = 150 * time.Millisecond
	lost := make(chan error, 1)
	h, err = holder.TakeWith(ctx, cards, short, t.TempDir(), nil, holder.Options{Lost: func(err error) { lost <- err }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	c, err := cards.GetClaim(ctx, spec.Project, spec.Key)
	if err != nil {
		t.Fatal(err)
	}
	// The lease lapsed while this process could not renew it, and another
	// took it.
	// took it. (The renewal may take the key back between the release and
	// the other's claim: release it again until the other holds it).
	other := "pid 7 on host elsewhere, data directory /x"
	for {
		if err := cards.Release(ctx, spec.Project, spec.Key, c.Holder); err != nil && !errors.Is(err, cardstore.ErrClaimLost) {
			t.Fatal(err)
		}
		_, err := cards.Claim(ctx, cardstore.ClaimRequest{ProjectID: spec.Project, Key: spec.Key, Holder: other, Lease: time.Hour})
		if err == nil {
			break
		}
		if !errors.Is(err, cardstore.ErrClaimHeld) {
			t.Fatal(err)
		}
	}
	select {
	case err := <-lost:
		if !errors.Is(err, holder.ErrHeld) || !strings.Contains(err.Error(), "is held by "+other) {
			t.Fatalf("Lost(%v), want ErrHeld naming %q", err, other)
		}
	case <-t.Context().Done():
		t.Fatal("Lost never called")
	}
}
