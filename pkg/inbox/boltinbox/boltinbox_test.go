package boltinbox_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/boltinbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/inboxtest"
)

// TestConformance runs the inbox backend suite on a bbolt file; every test
// ends with the file closed and checked (boltinbox.Check).
func TestConformance(t *testing.T) {
	inboxtest.Run(t, func(t *testing.T) inbox.Backend {
		path := filepath.Join(t.TempDir(), "inbox.db")
		d, err := boltinbox.Open(path, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := d.Close(); err != nil {
				t.Error(err)
			}
			if err := boltinbox.Check(path); err != nil {
				t.Error(err)
			}
		})
		return d
	})
}

// TestConformanceShared runs the suite on an inbox in a node file
// (OpenShared: the caller's file and committer).
func TestConformanceShared(t *testing.T) {
	inboxtest.Run(t, func(t *testing.T) inbox.Backend {
		path := filepath.Join(t.TempDir(), "cards.db")
		db, err := boltfile.Open(path, boltfile.Options{})
		if err != nil {
			t.Fatal(err)
		}
		commits := boltfile.NewCommitter(db, boltfile.CommitConfig{})
		d, err := boltinbox.OpenShared(db, commits)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := d.Close(); err != nil {
				t.Error(err)
			}
			commits.Close()
			if err := db.Close(); err != nil {
				t.Error(err)
			}
			if err := boltinbox.Check(path); err != nil {
				t.Error(err)
			}
		})
		return d
	})
}
