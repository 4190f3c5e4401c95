package natsauthz_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/boltpolicy"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/registry/boltreg"
)

// TestPolicyOps drives put (with and without base_version), get,
// history, history_get and rollback over a real nats-server, with the
// store validating against the project's registered tools.
func TestPolicyOps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, _, reg := startService(ctx, t, []*registry.Entry{toolEntry("ATLAS_TASK_LIST", `ATLASAction::"TASK_LIST"`)})
	cl, err := natsauthz.NewClient(meshtest.Conn(t, srv), "")
	if err != nil {
		t.Fatal(err)
	}
	good := `permit(principal, action == ATLASAction::"TASK_LIST", resource);` + "\n"
	other := `@id("all") permit(principal, action in [ATLASAction::"TASK_LIST"], resource);` + "\n"

	if _, err := cl.PutPolicies(ctx, "demo", `permit(principal, action == ATLASAction::"TASK_LST", resource);`); !errors.Is(err, authz.ErrInvalidPolicy) ||
		!strings.Contains(err.Error(), `unknown action ATLASAction::"TASK_LST"; did you mean ATLASAction::"TASK_LIST"?`) {
		t.Fatalf("typo put = %v", err)
	}
	if _, err := cl.PutPolicies(ctx, "demo", "permit(principal, action, resource"); !errors.Is(err, authz.ErrInvalidPolicy) ||
		!strings.Contains(err.Error(), "expected ')' to close the '(' at line 1, column 7") {
		t.Fatalf("syntax put = %v", err)
	}
	if h, err := cl.History(ctx, "demo"); err != nil || len(h) != 0 {
		t.Fatalf("history before any put = %v, %v", h, err)
	}
	if d, err := cl.ReplacePolicies(ctx, "demo", good, 0); err != nil || d.Version != 1 {
		t.Fatalf("first replace = %+v, %v", d, err)
	}
	if _, err := cl.ReplacePolicies(ctx, "demo", other, 0); !errors.Is(err, authz.ErrConflict) {
		t.Fatalf("stale replace = %v", err)
	}
	if d, err := cl.PutPolicies(ctx, "demo", other); err != nil || d.Version != 2 {
		t.Fatalf("put = %+v, %v", d, err)
	}
	h, err := cl.History(ctx, "demo")
	if err != nil || len(h) != 2 || h[0].Version != 2 || !h[0].Current || h[1].Version != 1 || h[1].Current {
		t.Fatalf("history = %+v, %v", h, err)
	}
	if d, err := cl.PolicyVersion(ctx, "demo", 1); err != nil || d.Policies != good {
		t.Fatalf("history_get 1 = %+v, %v", d, err)
	}
	if _, err := cl.PolicyVersion(ctx, "demo", 7); !errors.Is(err, authz.ErrNotFound) {
		t.Fatalf("history_get 7 = %v", err)
	}
	if _, err := cl.Rollback(ctx, "demo", 0, 2); !errors.Is(err, authz.ErrInvalidRequest) {
		t.Fatalf("rollback without version = %v", err)
	}
	if _, err := cl.Rollback(ctx, "demo", 1, 1); !errors.Is(err, authz.ErrConflict) {
		t.Fatalf("rollback on a stale base = %v", err)
	}
	d, err := cl.Rollback(ctx, "demo", 1, 2)
	if err != nil || d.Version != 3 || d.RolledBackFrom != 1 || d.Policies != good {
		t.Fatalf("rollback = %+v, %v", d, err)
	}
	if cur, err := cl.Policies(ctx, "demo"); err != nil || cur.Version != 3 || cur.Policies != good {
		t.Fatalf("get after rollback = %+v, %v", cur, err)
	}
	// A tool removed from the registry makes its old policies invalid:
	// rollback goes through the same validation.
	if err := reg.Delete(ctx, "demo", "ATLAS_TASK_LIST"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Rollback(ctx, "demo", 2, 3); !errors.Is(err, authz.ErrInvalidPolicy) || !strings.Contains(err.Error(), "unknown action") {
		t.Fatalf("rollback to a set naming a removed tool = %v", err)
	}
}

// toolEntry is the registry entry of a tool of project demo (action its
// options' cedar_action, when not empty).
func toolEntry(tool, action string) *registry.Entry {
	return &registry.Entry{ProjectID: "demo", ToolName: tool, Description: tool,
		Parameters: json.RawMessage(`{"type":"object"}`), TargetSubject: "cg.{ver}.{project_id}.{channel_id}.cmd.tool." + strings.ToLower(tool),
		AfterExecution: card.Suspend, Options: registry.Options{CedarAction: action}}
}

// startService runs the authz service on a fresh in-process nats-server,
// over a bbolt registry holding entries and the single-node policy store
// (validating against the registry's tools, as the mesh assembly opens
// it), in a temporary directory. The service stops, then the stores
// close, when the test ends; stopping it earlier is allowed. It returns
// the server, the service and the registry.
func startService(ctx context.Context, t *testing.T, entries []*registry.Entry, resources ...authz.ResourceResolver) (*embednats.Server, *natsauthz.Service, registry.Registry) {
	t.Helper()
	srv := meshtest.NATS(t)
	dir := t.TempDir()
	reg, err := boltreg.Open(filepath.Join(dir, "registry.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	for _, e := range entries {
		if _, err := reg.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	st, err := boltpolicy.Open(filepath.Join(dir, "policies.db"), boltpolicy.WithActions(authz.RegistryActions{Registry: reg}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	s, err := natsauthz.Start(ctx, meshtest.Conn(t, srv), natsauthz.StartConfig{DataDir: dir, Registry: reg, Store: st, Resources: resources})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return srv, s, reg
}
