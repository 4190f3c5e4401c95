package cynode_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/services/cynode"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/store"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/holder"
	"github.com/utpmesh/utpmesh/services/toolkit/tooltest"
)

// Every cynode worker uses one state mode, and one local holder at most:
// a worker of the other mode, or a second local one, refuses to start and
// says what to do; once the local holder stops, the shared state may be
// taken (its bucket then records the mode for good).
func TestStateModes(t *testing.T) {
	m := tooltest.Start(t, mesh.Config{}).Mesh
	open := func(mode string) (*cynode.Service, error) {
		nc, err := nats.Connect(m.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		s, err := cynode.Open(cynode.Deps{NC: nc, Cards: m.Cards(), DataDir: t.TempDir(), State: mode, StateReplicas: 0, Logger: ct.Quiet})
		if err == nil {
			t.Cleanup(func() { _ = s.Close() })
		}
		return s, err
	}
	if err := cynode.Provision(context.Background(), m.Conn(), 1); err != nil {
		t.Fatal(err)
	}
	// Provision records the replicated mode in m's bucket: the local
	// holder's story runs on a second mesh, whose core provisioned nothing.
	m2 := tooltest.Start(t, mesh.Config{}).Mesh
	open2 := func(mode string) (*cynode.Service, error) {
		nc, err := nats.Connect(m2.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		s, err := cynode.Open(cynode.Deps{NC: nc, Cards: m2.Cards(), DataDir: t.TempDir(), State: mode, Logger: ct.Quiet})
		if err == nil {
			t.Cleanup(func() { _ = s.Close() })
		}
		return s, err
	}
	local, err := open2(cynode.StateBolt)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode   string
		target error
		want   []string
	}{
		{cynode.StateJetStream, state.ErrModeMismatch, []string{"served from its local file (cynode-state.db) by pid", "utpmesh worker --cynode-state jetstream|bolt cynode"}},
		{cynode.StateBolt, holder.ErrHeld, []string{"is held by pid", "utpmesh worker --cynode-state jetstream|bolt cynode"}},
	} {
		if _, err := open2(tc.mode); !errors.Is(err, tc.target) {
			t.Fatalf("a %s worker beside a local one: %v, want %v", tc.mode, err, tc.target)
		} else {
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not say %q", err, w)
				}
			}
		}
	}
	if err := local.Close(); err != nil { // its lease is given up
		t.Fatal(err)
	}
	if _, err := open2(cynode.StateJetStream); err != nil {
		t.Fatalf("the shared state after the local holder stopped: %v", err)
	}
	if _, err := open2(cynode.StateBolt); !errors.Is(err, state.ErrModeMismatch) || !strings.Contains(err.Error(), "--cynode-state jetstream (the default)") {
		t.Fatalf("a local worker beside the shared state: %v, want ErrModeMismatch saying what to do", err)
	}
	// On the first mesh, provisioned by the core: the bucket records the
	// mode before any worker started.
	if _, err := open(cynode.StateBolt); !errors.Is(err, state.ErrModeMismatch) {
		t.Fatalf("a local worker on a mesh whose core provisioned the shared state: %v, want ErrModeMismatch", err)
	}
	if _, err := open(cynode.StateJetStream); err != nil {
		t.Fatal(err)
	}
	for _, d := range []cynode.Deps{{State: "postgres"}, {State: cynode.StateBolt, StateReplicas: 3}, {StateReplicas: 9}} {
		d.DataDir, d.NC, d.Logger = t.TempDir(), m.Conn(), ct.Quiet
		if _, err := cynode.Open(d); err == nil || !strings.Contains(err.Error(), "use ") {
			t.Errorf("Open with state %q, %d replicas: %v; want a refusal saying what to use", d.State, d.StateReplicas, err)
		}
	}
}

// A data directory left by an earlier version (cynode.db) is imported
// once at start, in either mode, and renamed cynode.db.imported.
func TestUpgradeImportsCynodeDB(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("store", "testdata", "cynode-v1.db"))
	if err != nil {
		t.Fatal(err)
	}
	m := tooltest.Start(t, mesh.Config{}).Mesh
	for _, mode := range []string{cynode.StateJetStream, cynode.StateBolt} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, cynode.DBFile), raw, 0o600); err != nil {
				t.Fatal(err)
			}
			d := cynode.Deps{DataDir: dir, State: mode, Logger: ct.Quiet}
			if mode == cynode.StateJetStream {
				d.NC = m.Conn()
			} else { // no mesh to check the mode with; audit records unused
				d.Resolve = func(context.Context) (*nats.Conn, error) { return nil, errors.New("no mesh in this test") }
			}
			s, err := cynode.Open(d)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := os.Stat(filepath.Join(dir, cynode.DBFile+store.ImportedSuffix)); err != nil {
				t.Fatalf("cynode.db was not imported and renamed: %v", err)
			}
			_, content, err := s.Store.GetArtifact(context.Background(), "t2", "copy.md")
			if err != nil || string(content) != "# Report\nv1 content\n" {
				t.Fatalf("imported artifact: %q, %v", content, err)
			}
		})
	}
}
