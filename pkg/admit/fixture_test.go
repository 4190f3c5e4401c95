package admit_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/pkg/admit"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/registry/boltreg"
)

// admitFiles is what an admission service runs on in these tests: a
// CardStore and a registry in a temporary directory (closed by cleanup),
// the registry holding project demo's echo tool when withEcho, and the
// directory's admission key.
type admitFiles struct {
	cards *boltstore.Store
	reg   *boltreg.Store
	key   *admit.Key
}

func openAdmitFiles(ctx context.Context, t *testing.T, withEcho bool) admitFiles {
	t.Helper()
	dir := t.TempDir()
	cards, err := boltstore.Open(filepath.Join(dir, "cards.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cards.Close() })
	reg, err := boltreg.Open(filepath.Join(dir, "registry.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	if withEcho {
		if _, err := reg.Put(ctx, &registry.Entry{ProjectID: "demo", ToolName: "echo", Description: "echo",
			Parameters: []byte(`{"type":"object"}`), TargetSubject: "cg.{ver}.{project_id}.{channel_id}.cmd.tool.echo", AfterExecution: card.Suspend}); err != nil {
			t.Fatal(err)
		}
	}
	key, err := admit.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	return admitFiles{cards: cards, reg: reg, key: key}
}
