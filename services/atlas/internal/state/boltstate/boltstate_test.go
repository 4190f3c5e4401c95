package boltstate_test

import (
	"path/filepath"
	"testing"

	"github.com/utpmesh/utpmesh/services/atlas/internal/state"
	"github.com/utpmesh/utpmesh/services/atlas/internal/state/boltstate"
	"github.com/utpmesh/utpmesh/services/atlas/internal/state/statetest"
)

func TestConformance(t *testing.T) {
	statetest.Run(t, func(t *testing.T) (state.Store, state.Store) {
		s, err := boltstate.Open(filepath.Join(t.TempDir(), "atlas-test.db"), 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s, s // one writer per file: both handles are the same
	})
}
