package meshauth_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/subjects"
)

// subjectsHash is the hash suffix subjects.ToolToken gives name.
func subjectsHash(name string) string {
	t := subjects.ToolToken(name)
	return t[strings.LastIndexByte(t, '_')+1:]
}

func TestEnsure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	pub, created, err := meshauth.Ensure(dir, "agent-demo")
	if err != nil || !created || !strings.HasPrefix(pub, "U") {
		t.Fatalf("first Ensure = %q, %v, %v", pub, created, err)
	}
	st, err := os.Stat(creds.SeedPath(dir, "agent-demo"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("seed file: %v, mode %v; want 0600", err, st.Mode())
	}
	again, created, err := meshauth.Ensure(dir, "agent-demo")
	if err != nil || created || again != pub {
		t.Fatalf("second Ensure = %q, %v, %v; want the same key, not created", again, created, err)
	}
	if _, err := creds.Option(creds.SeedPath(dir, "agent-demo")); err != nil {
		t.Fatalf("Option(seed) = %v", err)
	}
	bad := filepath.Join(dir, "bad.nk")
	if err := os.WriteFile(bad, []byte("not a seed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := meshauth.Ensure(dir, "bad"); !errors.Is(err, meshauth.ErrCreds) || !strings.Contains(err.Error(), "delete it") {
		t.Fatalf("Ensure on a corrupt seed = %v", err)
	}
	if _, err := creds.Option(filepath.Join(dir, "missing.nk")); !errors.Is(err, meshauth.ErrCreds) || !strings.Contains(err.Error(), "--creds") {
		t.Fatalf("Option(missing) = %v", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		id   meshauth.Identity
		name string
		err  string
	}{
		{meshauth.Identity{Role: meshauth.RoleCore}, "core", ""},
		{meshauth.Identity{Role: meshauth.RoleAdmin}, "admin", ""},
		{meshauth.Identity{Role: meshauth.RoleAgent, Project: "demo"}, "agent-demo", ""},
		{meshauth.Identity{Role: meshauth.RoleAgent, Project: "a.b"}, "agent-a.b", "project_id"},
		{meshauth.Identity{Role: meshauth.RoleWorker, Service: "atlas.tasks", Tools: []meshauth.Tool{{Name: "ATLAS_TASK_LIST", Target: "atlas_task_list"}}}, "worker-atlas_tasks", ""},
		{meshauth.Identity{Role: meshauth.RoleWorker, Service: "echo"}, "worker-echo", "needs a service and its tools"},
		{meshauth.Identity{Role: meshauth.RoleOperator}, "operator", ""},
		{meshauth.Identity{Role: meshauth.RoleOperator, Operator: "ops-1"}, "operator-ops-1", ""},
		{meshauth.Identity{Role: meshauth.RoleOperator, Operator: "a.b"}, "operator-a_b_" + subjectsHash("a.b"), "operator name"},
		{meshauth.Identity{Role: meshauth.RoleAgent, Project: "demo", Agent: "alice"}, "agent-demo.alice", ""},
		{meshauth.Identity{Role: meshauth.RoleAgent, Project: "demo", Agent: "a b"}, "agent-demo.a_b_" + subjectsHash("a b"), "agent_id"},
		{meshauth.Identity{Role: meshauth.RoleWorker, Service: "rev", Tools: []meshauth.Tool{{Name: "rev", Target: "rev"}}, Projects: []string{"demo", "x.y"}}, "worker-rev", "--projects"},
		{meshauth.Identity{Role: meshauth.RoleAdmin, Key: "SUAKEY"}, "admin", "not a public user nkey"},
		{meshauth.Identity{Role: "root"}, "root", `unknown role "root"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.id.Name(); got != tc.name {
				t.Errorf("Name = %q, want %q", got, tc.name)
			}
			err := tc.id.Validate()
			if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("Validate = %v, want %q", err, tc.err)
			}
		})
	}
}

// TestEnsureConcurrent: processes that make the same identity at once
// (cluster nodes sharing a credentials directory) all get the one seed
// that won, never a half-written file.
func TestEnsureConcurrent(t *testing.T) {
	dir := t.TempDir()
	const n = 16
	pubs, errs := make([]string, n), make([]error, n)
	start := make(chan struct{})
	done := make(chan int)
	for i := range n {
		go func() {
			<-start
			pubs[i], _, errs[i] = meshauth.Ensure(dir, "worker-x")
			done <- i
		}()
	}
	close(start)
	for range n {
		<-done
	}
	for i := range n {
		if errs[i] != nil || pubs[i] != pubs[0] {
			t.Fatalf("Ensure %d = %q, %v; want %q", i, pubs[i], errs[i], pubs[0])
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("credentials directory holds %d files, want the one seed: %v", len(entries), entries)
	}
}
