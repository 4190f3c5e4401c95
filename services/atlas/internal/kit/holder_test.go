package kit

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/services/atlas"
)

// waitFor polls cond (every 10ms, up to 10s): the condition is an event
// in another goroutine (a renewal) that the test cannot subscribe to.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHolderLeaseIsRenewedReleasedAndLost(t *testing.T) {
	holderLease = 300 * time.Millisecond
	defer func() { holderLease = HolderLease }()
	nc := meshtest.Conn(t, meshtest.NATS(t))
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "cards.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	ctx := context.Background()
	deps := func() atlas.Deps {
		return atlas.Deps{NC: nc, Store: st, DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	}
	claim := func() *cardstore.Claim {
		c, err := st.GetClaim(ctx, HolderProject, HolderKey(atlas.GroupTasks))
		if errors.Is(err, cardstore.ErrNotFound) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	a, err := New(atlas.GroupTasks, deps())
	if err != nil {
		t.Fatal(err)
	}
	first := claim()
	// Renewed: the lease moves on, so it outlives its first term.
	waitFor(t, "the lease is renewed", func() bool { c := claim(); return c != nil && c.ExpiresAt.After(first.ExpiresAt) })
	if _, err := New(atlas.GroupTasks, deps()); !errors.Is(err, ErrStateHeld) {
		t.Fatalf("second holder: %v", err)
	}

	// Lost: when another process got the lease (it lapsed while this one
	// could not reach the CardStore), this one refuses every call.
	// (The renewal may take the key back between the release and the
	// other's claim: release it again until the other holds it.)
	for {
		if err := st.Release(ctx, HolderProject, HolderKey(atlas.GroupTasks), first.Holder); err != nil && !errors.Is(err, cardstore.ErrClaimLost) {
			t.Fatal(err)
		}
		_, err := st.Claim(ctx, cardstore.ClaimRequest{ProjectID: HolderProject, Key: HolderKey(atlas.GroupTasks), Holder: "pid 7 on host elsewhere, data directory /x", Lease: time.Hour})
		if err == nil {
			break
		}
		if !errors.Is(err, cardstore.ErrClaimHeld) {
			t.Fatal(err)
		}
	}
	waitFor(t, "the service notices it lost the lease", func() bool { return a.Refused() != nil })
	if msg := a.Refused().Error(); !strings.Contains(msg, "held by pid 7 on host elsewhere") {
		t.Fatalf("refusal = %q", msg)
	}
	_ = a.Close()
	if err := st.Release(ctx, HolderProject, HolderKey(atlas.GroupTasks), "pid 7 on host elsewhere, data directory /x"); err != nil {
		t.Fatal(err)
	}

	// Released on Close: the next one takes it at once.
	b, err := New(atlas.GroupTasks, deps())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if c := claim(); c != nil {
		t.Fatalf("after Close the lease is still held: %+v", c)
	}
}
