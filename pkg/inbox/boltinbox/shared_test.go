package boltinbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// openShared opens an inbox in a node file of its own; cleanup closes the
// inbox, the committer and the file and checks it.
func openShared(t *testing.T, path string) (*DB, *bolt.DB, *boltfile.Committer) {
	t.Helper()
	db, err := boltfile.Open(path, boltfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	commits := boltfile.NewCommitter(db, boltfile.CommitConfig{})
	d, err := OpenShared(db, commits)
	if err != nil {
		t.Fatal(err)
	}
	return d, db, commits
}

func closeShared(t *testing.T, d *DB, db *bolt.DB, commits *boltfile.Committer) {
	t.Helper()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	path := db.Path()
	commits.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := Check(path); err != nil {
		t.Fatal(err)
	}
}

func report(turn, call string) *utp.Report {
	return &utp.Report{ToolCallID: call, AgentTurnID: turn, AgentID: "a", ToolResultCardID: card.NewID(),
		Status: card.StatusSuccess, AfterExecution: card.Suspend}
}

// TestMigrate: the entries of a standalone inbox.db (pending, acked and
// stale ones, the epochs, the sequence) move into a node file in one
// step; the file is renamed; the dedupe and the order go on as before; a
// second start finds nothing to do; a crash between the copy and the
// rename only renames.
func TestMigrate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	oldPath := filepath.Join(dir, "inbox.db")
	old, err := Open(oldPath, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e1, _, err := old.Insert(ctx, "p", "c", report("t1", "k1"), "")
	if err != nil {
		t.Fatal(err)
	}
	e2, _, err := old.Insert(ctx, "p", "c", report("t1", "k2"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Ack(ctx, "p", []string{e1.InboxID}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := old.SetEpoch(ctx, "p", "t2", 3); err != nil {
		t.Fatal(err)
	}
	stale, _, err := old.Insert(ctx, "p", "c", report("t2", "k3"), "") // epoch 0 < 3
	if err != nil || stale.State != inbox.StateStale {
		t.Fatalf("stale insert: %+v, %v", stale, err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	nodePath := filepath.Join(dir, "cards.db")
	d, db, commits := openShared(t, nodePath)
	n, err := d.Migrate(ctx, oldPath)
	if err != nil || n != 3 {
		t.Fatalf("Migrate = %d, %v; want 3 entries", n, err)
	}
	if _, err := os.Stat(oldPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("inbox.db after the migration: %v, want renamed", err)
	}
	if _, err := os.Stat(oldPath + ".migrated"); err != nil {
		t.Fatalf("inbox.db.migrated: %v", err)
	}
	all, err := d.List(ctx, "p", inbox.ListQuery{AgentID: "a", State: inbox.StateAll, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all[0].InboxID != e1.InboxID || all[0].State != inbox.StateAcked ||
		all[1].InboxID != e2.InboxID || all[1].State != inbox.StatePending || all[2].State != inbox.StateStale {
		t.Fatalf("entries after the migration = %+v", all)
	}
	// The dedupe index moved: a duplicate finds its entry.
	again, created, err := d.Insert(ctx, "p", "c", report("t1", "k2"), "")
	if err != nil || created || again.InboxID != e2.InboxID {
		t.Fatalf("duplicate after the migration = %+v, created %v, %v", again, created, err)
	}
	// The epochs moved: a report of t2's old epoch is stale.
	if e, _, err := d.Insert(ctx, "p", "c", report("t2", "k4"), ""); err != nil || e.State != inbox.StateStale {
		t.Fatalf("old epoch after the migration = %+v, %v", e, err)
	}
	// The sequence moved: a new entry sorts after the old ones.
	fresh, _, err := d.Insert(ctx, "p", "c", report("t1", "k5"), "")
	if err != nil {
		t.Fatal(err)
	}
	pending, err := d.List(ctx, "p", inbox.ListQuery{AgentID: "a", State: inbox.StatePending, Limit: 10})
	if err != nil || len(pending) != 2 || pending[0].InboxID != e2.InboxID || pending[1].InboxID != fresh.InboxID {
		t.Fatalf("pending after the migration = %+v, %v", pending, err)
	}
	// Nothing to do the next time.
	if n, err := d.Migrate(ctx, oldPath); err != nil || n != 0 {
		t.Fatalf("second Migrate = %d, %v", n, err)
	}

	// A crash after the copy's commit, before the rename: the file is
	// back, the record is there; Migrate renames it without copying.
	if err := os.Rename(oldPath+".migrated", oldPath); err != nil {
		t.Fatal(err)
	}
	if n, err := d.Migrate(ctx, oldPath); err != nil || n != 0 {
		t.Fatalf("Migrate after a crash = %d, %v; want only the rename", n, err)
	}
	if _, err := os.Stat(oldPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("inbox.db after the second migration: %v, want renamed", err)
	}
	if all, _ := d.List(ctx, "p", inbox.ListQuery{AgentID: "a", State: inbox.StateAll, Limit: 10}); len(all) != 5 {
		t.Fatalf("entries = %d, want 5 (nothing copied twice)", len(all))
	}
	closeShared(t, d, db, commits)
}

// TestMigrateRefuses: a node file that holds entries already, and a file
// that is not an inbox's, are refused with an error naming the files;
// nothing moves.
func TestMigrateRefuses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	oldPath := filepath.Join(dir, "inbox.db")
	old, err := Open(oldPath, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := old.Insert(ctx, "p", "c", report("t1", "k1"), ""); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	d, db, commits := openShared(t, filepath.Join(dir, "cards.db"))
	if _, _, err := d.Insert(ctx, "p", "c", report("t9", "k9"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Migrate(ctx, oldPath); err == nil || !strings.Contains(err.Error(), "holds inbox entries already") || !strings.Contains(err.Error(), oldPath) {
		t.Fatalf("Migrate into a node file with entries = %v, want a refusal naming %s", err, oldPath)
	}
	if _, err := os.Stat(oldPath); err != nil {
		t.Fatalf("the refused file must stay: %v", err)
	}

	foreign := filepath.Join(dir, "foreign.db")
	fdb, err := boltfile.Open(foreign, boltfile.Options{Schema: &boltfile.Schema{Kind: "other", Version: "7", Buckets: [][]byte{[]byte("x")}}})
	if err != nil {
		t.Fatal(err)
	}
	fdb.Close()
	if _, err := d.Migrate(ctx, foreign); !errors.Is(err, ErrSchemaVersion) {
		t.Fatalf("Migrate of a foreign file = %v, want ErrSchemaVersion", err)
	}
	closeShared(t, d, db, commits)
}
