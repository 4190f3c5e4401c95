package dirblob_test

import (
	"os"
	"testing"

	"github.com/utpmesh/utpmesh/services/state/blob"
	"github.com/utpmesh/utpmesh/services/state/blob/blobtest"
	"github.com/utpmesh/utpmesh/services/state/blob/dirblob"
)

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T, maxBytes int64) (blob.Store, blob.Store) {
		s, err := dirblob.Open(t.TempDir(), maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		return s, s
	})
}

// A put leaves no temporary file behind.
func TestNoLeftovers(t *testing.T) {
	dir := t.TempDir()
	s, err := dirblob.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 || ents[0].Name() != "a" {
		t.Fatalf("directory holds %v (%v), want just a", ents, err)
	}
}
