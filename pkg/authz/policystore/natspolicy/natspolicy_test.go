package natspolicy_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/boltpolicy"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/natspolicy"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/policystoretest"
	"github.com/utpmesh/utpmesh/pkg/registry/boltreg"
)

// served is the server side of one opening: the bolt store behind a
// running authz service.
type served struct {
	svc   *natsauthz.Service
	store *boltpolicy.Store
}

// stop stops the service, then closes the store (the caller owns the
// store and closes it after Stop).
func (s *served) stop(t *testing.T) {
	t.Helper()
	if err := s.svc.Stop(context.Background()); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if err := s.store.Close(); err != nil {
		t.Errorf("Close of the bolt store: %v", err)
	}
}

// newStorage returns an Opener of one bolt file served by natsauthz on a
// real nats-server of its own (no two storages share a server, so their
// services never answer each other's requests). Each open stops the
// previous opening's service and closes its store, reopens the file with
// cfg, serves it and returns a Client on a connection of its own: the
// suite's reopen checks that what the service acknowledged is in the file.
// The service has no identities, so writes are not signed (the signing
// tests are in pkg/authz/natsauthz and cmd/utpmesh).
func newStorage(t *testing.T) policystoretest.Opener {
	ns := meshtest.NATS(t)
	dir := t.TempDir()
	reg, err := boltreg.Open(filepath.Join(dir, "registry.db"))
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	var cur *served
	t.Cleanup(func() {
		if cur != nil {
			cur.stop(t)
		}
	})
	return func(t *testing.T, cfg policystoretest.Config) policystore.Store {
		t.Helper()
		if cur != nil {
			cur.stop(t)
			cur = nil
		}
		var opts []boltpolicy.Option
		if cfg.Actions != nil {
			opts = append(opts, boltpolicy.WithActions(cfg.Actions))
		}
		if cfg.HistoryLimit != 0 {
			opts = append(opts, boltpolicy.WithHistoryLimit(cfg.HistoryLimit))
		}
		st, err := boltpolicy.Open(filepath.Join(dir, "policies.db"), opts...)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		s, err := natsauthz.Start(context.Background(), meshtest.Conn(t, ns), natsauthz.StartConfig{DataDir: dir, Registry: reg, Store: st})
		if err != nil {
			_ = st.Close()
			t.Fatalf("Start: %v", err)
		}
		cur = &served{svc: s, store: st}
		c, err := natspolicy.NewClient(meshtest.Conn(t, ns), "")
		if err != nil {
			t.Fatalf("NewClient: %v", err)
		}
		return c
	}
}

// TestConformance runs the policy store suite through the NATS client,
// over the bolt store behind the authz service.
func TestConformance(t *testing.T) {
	policystoretest.Run(t, newStorage)
}

// TestClose: a closed client fails every call with authz.ErrClosed; Close
// is idempotent and leaves the stored policies to the next client.
func TestClose(t *testing.T) {
	ctx := context.Background()
	open := newStorage(t)
	c := open(t, policystoretest.Config{}).(*natspolicy.Client)
	if _, err := c.PutPolicies(ctx, "demo", policystoretest.Policy(1)); err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	calls := map[string]error{}
	_, calls["Policies"] = c.Policies(ctx, "demo")
	_, calls["Config"] = c.Config(ctx, "demo")
	_, calls["PutPolicies"] = c.PutPolicies(ctx, "demo", policystoretest.Policy(2))
	calls["PutConfig"] = c.PutConfig(ctx, "demo", authz.ProjectConfig{})
	_, calls["ReplacePolicies"] = c.ReplacePolicies(ctx, "demo", policystoretest.Policy(2), 1)
	_, calls["History"] = c.History(ctx, "demo")
	_, calls["PolicyVersion"] = c.PolicyVersion(ctx, "demo", 1)
	_, calls["Rollback"] = c.Rollback(ctx, "demo", 1, 1)
	for name, err := range calls {
		if !errors.Is(err, authz.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if d, err := open(t, policystoretest.Config{}).Policies(ctx, "demo"); err != nil || d.Version != 1 {
		t.Fatalf("policies through a new client = %+v, %v; want version 1", d, err)
	}
}
