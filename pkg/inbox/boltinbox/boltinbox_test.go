package boltinbox_test

import (
	"path/filepath"
	"testing"
	"time"

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
