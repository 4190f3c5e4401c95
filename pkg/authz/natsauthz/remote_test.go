package natsauthz_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/registry"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestRemote: issuer_key serves the public key only; Remote reads
// configs, policies and keys over a real nats-server, uses them for the
// TTL, sees a change after it, and never answers from an expired entry
// when the service is gone.
func TestRemote(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, s, _ := startService(ctx, t, []*registry.Entry{toolEntry("echo", "")})
	key, _, err := s.Keys.Ensure(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	cl, _ := natsauthz.NewClient(meshtest.Conn(t, srv), "")
	got, err := cl.IssuerKey(ctx, "demo")
	if err != nil || got.KID != key.KID || !got.Public.Equal(key.Public) || got.Private != nil {
		t.Fatalf("IssuerKey = %+v, %v; want demo's public key %s only", got, err, key.KID)
	}
	if _, err := cl.IssuerKey(ctx, "nokey"); !errors.Is(err, authz.ErrNotFound) {
		t.Fatalf("IssuerKey of a project without a key = %v, want not found", err)
	}

	clock := &fakeClock{t: time.Now()}
	r, err := natsauthz.NewRemote(meshtest.Conn(t, srv), natsauthz.RemoteConfig{TTL: 5 * time.Second, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Policies(ctx, "demo"); !errors.Is(err, authz.ErrNotFound) {
		t.Fatalf("policies before any put = %v, want not found", err)
	}
	if pub, err := r.PublicKey(ctx, key.Issuer, key.KID); err != nil || !pub.Equal(key.Public) {
		t.Fatalf("PublicKey = %v", err)
	}
	if _, err := r.PublicKey(ctx, key.Issuer, "not-the-kid"); !errors.Is(err, mandate.ErrUnknownKey) {
		t.Fatalf("PublicKey with another kid = %v, want unknown key", err)
	}
	if _, err := r.PublicKey(ctx, "someone", key.KID); !errors.Is(err, mandate.ErrUnknownKey) {
		t.Fatalf("PublicKey of a foreign issuer = %v, want unknown key", err)
	}
	if _, err := s.Store.PutPolicies(ctx, "demo", `permit(principal, action == Action::"echo", resource);`); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Policies(ctx, "demo"); !errors.Is(err, authz.ErrNotFound) {
		t.Fatalf("within the TTL the cached answer stands: %v", err)
	}
	clock.Add(5 * time.Second)
	doc, err := r.Policies(ctx, "demo")
	if err != nil || doc.Version != 1 {
		t.Fatalf("after the TTL: %+v, %v; want version 1", doc, err)
	}
	if c, err := r.Config(ctx, "demo"); err != nil || !c.Required() {
		t.Fatalf("config = %+v, %v; want mandates required", c, err)
	}

	// The service goes away: cached answers hold for the TTL, then fail.
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Policies(ctx, "demo"); err != nil {
		t.Fatalf("within the TTL: %v", err)
	}
	clock.Add(5 * time.Second)
	for name, f := range map[string]func() error{
		"policies": func() error { _, err := r.Policies(ctx, "demo"); return err },
		"config":   func() error { _, err := r.Config(ctx, "demo"); return err },
		"key":      func() error { _, err := r.PublicKey(ctx, key.Issuer, key.KID); return err },
	} {
		if err := f(); err == nil || errors.Is(err, authz.ErrNotFound) || errors.Is(err, mandate.ErrUnknownKey) {
			t.Errorf("%s after the TTL with the service gone = %v, want a fetch error (no stale answer)", name, err)
		}
	}
}
