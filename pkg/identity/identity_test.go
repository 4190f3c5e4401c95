package identity_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/utpmesh/utpmesh/internal/audit"
	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/identity"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

func key(t *testing.T) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return pub
}

func worker(t *testing.T, service string, tools ...string) meshauth.Identity {
	id := meshauth.Identity{Role: meshauth.RoleWorker, Service: service, Key: key(t)}
	for _, n := range tools {
		id.Tools = append(id.Tools, meshauth.Tool{Name: n, Target: n})
	}
	return id
}

// TestStore: the list survives a reopen; a name is added once; a corrupt
// file is an error saying what to do.
func TestStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d", identity.FileName)
	st, err := identity.OpenStore(path)
	if err != nil || len(st.List()) != 0 {
		t.Fatalf("OpenStore of no file = %v, %v", st, err)
	}
	rev := worker(t, "rev", "rev")
	if err := st.Add(rev); err != nil {
		t.Fatal(err)
	}
	if err := st.Add(rev); !errors.Is(err, identity.ErrExists) {
		t.Fatalf("Add twice = %v, want ErrExists", err)
	}
	again, err := identity.OpenStore(path)
	if err != nil || len(again.List()) != 1 || again.List()[0].Key != rev.Key {
		t.Fatalf("reopened = %v, %v", again.List(), err)
	}
	if _, err := again.Remove("worker-nope"); !errors.Is(err, identity.ErrNotFound) {
		t.Fatalf("Remove unknown = %v", err)
	}
	if _, err := again.Remove("worker-rev"); err != nil {
		t.Fatal(err)
	}
	if st, _ := identity.OpenStore(path); len(st.List()) != 0 {
		t.Fatalf("after remove: %v", st.List())
	}
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.OpenStore(path); err == nil || !strings.Contains(err.Error(), "add the identities again") {
		t.Fatalf("corrupt file = %v", err)
	}
}

// mesh is the service's view of a mesh: what it admits, and reloads.
type mesh struct {
	mu      sync.Mutex
	st      *identity.Store
	builtin []meshauth.Identity
	reloads int
	fail    error
}

func (m *mesh) Identities() []meshauth.Identity {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append(append([]meshauth.Identity{}, m.builtin...), m.st.List()...)
}

func (m *mesh) ReloadIdentities() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reloads++
	return m.fail
}

// TestService: add, list and remove over a real NATS server; every
// refusal says what to pass; a failed reload takes the change back.
func TestService(t *testing.T) {
	nc := meshtest.Conn(t, meshtest.NATS(t))
	st, err := identity.OpenStore(filepath.Join(t.TempDir(), identity.FileName))
	if err != nil {
		t.Fatal(err)
	}
	echo := worker(t, "echo", "echo")
	m := &mesh{st: st, builtin: []meshauth.Identity{{Role: meshauth.RoleAdmin, Key: key(t)}, echo}}
	srv, err := identity.NewServer(nc, st, m, svc.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	cl, err := identity.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	audits := make(chan audit.Record, 64)
	ap, _ := subjects.AuditPattern(subjects.DefaultVersion)
	if _, err := nc.Subscribe(ap, func(msg *nats.Msg) {
		var r audit.Record
		if json.Unmarshal(msg.Data, &r) == nil {
			audits <- r
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		id   meshauth.Identity
		err  error
		want string
	}{
		{"no key", meshauth.Identity{Role: meshauth.RoleWorker, Service: "r", Tools: []meshauth.Tool{{Name: "r", Target: "r"}}}, identity.ErrInvalid, "no public key"},
		{"admin role", meshauth.Identity{Role: meshauth.RoleAdmin, Key: key(t)}, identity.ErrInvalid, "add a worker"},
		{"project agent", meshauth.Identity{Role: meshauth.RoleAgent, Project: "demo", Key: key(t)}, identity.ErrInvalid, "PROJECT/AGENT"},
		{"raw commands", meshauth.Identity{Role: meshauth.RoleAgent, Project: "demo", Agent: "a", RawCommands: true, Key: key(t)}, identity.ErrInvalid, "raw commands"},
		{"extra subjects", func() meshauth.Identity { w := worker(t, "r", "r"); w.Publish = []string{">"}; return w }(), identity.ErrInvalid, "extra subjects"},
		{"no tools", meshauth.Identity{Role: meshauth.RoleWorker, Service: "r", Key: key(t)}, identity.ErrInvalid, "needs a service and its tools"},
		{"a taken tool", worker(t, "mirror", "echo"), identity.ErrExists, "echo is served by worker-echo"},
		{"a taken name", worker(t, "echo", "other"), identity.ErrExists, "worker-echo"},
		{"a taken key", func() meshauth.Identity { w := worker(t, "r", "r"); w.Key = echo.Key; return w }(), identity.ErrExists, "key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cl.Add(ctx, tc.id)
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Add = %v, want %v naming %q", err, tc.err, tc.want)
			}
		})
	}
	if m.reloads != 0 || len(st.List()) != 0 {
		t.Fatalf("a refused add reloaded (%d) or stayed (%v)", m.reloads, st.List())
	}

	alice := meshauth.Identity{Role: meshauth.RoleAgent, Project: "demo", Agent: "alice", Key: key(t)}
	list, err := cl.Add(ctx, alice)
	if err != nil || m.reloads != 1 {
		t.Fatalf("Add alice = %v, %v (reloads %d)", list, err, m.reloads)
	}
	found := false
	for _, e := range list {
		found = found || (e.Name == "agent-demo.alice" && e.Added)
	}
	if !found {
		t.Fatalf("list after add = %+v", list)
	}
	m.fail = errors.New("reload refused")
	if _, err := cl.Add(ctx, worker(t, "rev", "rev")); err == nil || !strings.Contains(err.Error(), "reload refused") {
		t.Fatalf("Add with a failing reload = %v", err)
	}
	if len(st.List()) != 1 {
		t.Fatalf("the failed add stayed: %v", st.List())
	}
	m.fail = nil
	if _, err := cl.Remove(ctx, "agent-demo.alice"); err != nil || len(st.List()) != 0 {
		t.Fatalf("Remove = %v, list %v", err, st.List())
	}
	if _, err := cl.Remove(ctx, "worker-echo"); !errors.Is(err, identity.ErrNotFound) {
		t.Fatalf("Remove a built-in = %v, want ErrNotFound", err)
	}

	// Every refusal and change is an audit record.
	want := map[string]bool{"add refused worker-mirror": true, "add allowed agent-demo.alice": true, "remove allowed agent-demo.alice": true}
	deadline := time.After(10 * time.Second)
	for len(want) > 0 {
		select {
		case r := <-audits:
			verdict := map[bool]string{true: "allowed", false: "refused"}[r.Allowed]
			delete(want, r.Op+" "+verdict+" "+r.Detail["identity"])
		case <-deadline:
			t.Fatalf("no audit records for %v", want)
		}
	}
}
