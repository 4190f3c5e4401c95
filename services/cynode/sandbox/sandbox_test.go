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
