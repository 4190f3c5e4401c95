package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
)

// TestReapAtStart: sandboxes an earlier process left behind are removed
// when the service starts.
func TestReapAtStart(t *testing.T) {
	dir := t.TempDir()
	left := filepath.Join(dir, "sandboxes", "deadbeef", "work")
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), gateway.SandboxConfig{}, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sandboxes", "deadbeef")); !os.IsNotExist(err) {
		t.Fatalf("left-over sandbox: %v", err)
	}
}

// TestReapMountedAtStart: a work dir an earlier process left mounted (its
// job-dir tmpfs) is unmounted and removed when the service starts.
func TestReapMountedAtStart(t *testing.T) {
	if !canMount() {
		t.Skip("only root mounts the work dirs' tmpfs")
	}
	dir := t.TempDir()
	left := filepath.Join(dir, "sandboxes", "cafe", "work")
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := mountWork(left, 1<<20, 200001); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmountUnder(dir) })
	if err := os.WriteFile(filepath.Join(left, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), gateway.SandboxConfig{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(filepath.Join(dir, "sandboxes", "cafe")); !os.IsNotExist(err) {
		t.Fatalf("left-over mounted sandbox: %v", err)
	}
}

// TestSeccompFilter: the filter assembles for this architecture into
// whole struct sock_filter entries (bwrap rejects anything else).
func TestSeccompFilter(t *testing.T) {
	prog, err := seccompFilter()
	if err != nil {
		t.Fatal(err)
	}
	if len(prog) == 0 || len(prog)%8 != 0 || len(prog)/8 > 4096 {
		t.Fatalf("filter of %d bytes", len(prog))
	}
}
