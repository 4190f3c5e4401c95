package store_test

import (
	"errors"
	"testing"

	"github.com/utpmesh/utpmesh/services/cynode/store"
)

// FuzzListCursor feeds arbitrary cursors (what a caller passes as
// "cursor") and key prefixes to the lists: each answers a page or
// ErrInvalid, never a panic, and never an item outside the list.
func FuzzListCursor(f *testing.F) {
	s := openF(f)
	for _, k := range []string{"a.1", "a.2", "b.1"} {
		if _, err := s.CreateSetting(ctx, store.SystemScope, store.Setting{Key: k, Value: k}, store.Write{At: at}); err != nil {
			f.Fatal(err)
		}
		if _, err := s.PutArtifact(ctx, "t1", k, []byte(k), at); err != nil {
			f.Fatal(err)
		}
	}
	_, next, err := s.ListSettings(ctx, store.SystemScope, "a.", store.Page{Limit: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(next, "a.", 1)
	f.Add("", "", 2)
	f.Add("%%%", "b", 3)
	f.Add(store.EncodeCursor([]byte("system\x00\x00a.1")), "", 1)
	f.Add(store.EncodeCursor([]byte("t1\x00zzz")), "", 1)
	f.Fuzz(func(t *testing.T, cursor, prefix string, limit int) {
		page := store.Page{Limit: limit%5 + 5, Cursor: cursor}
		items, _, err := s.ListSettings(ctx, store.SystemScope, prefix, page)
		if err != nil && !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("ListSettings(%q, %q): %v", cursor, prefix, err)
		}
		for _, it := range items {
			if len(it.Key) < len(prefix) || it.Key[:len(prefix)] != prefix {
				t.Fatalf("ListSettings(%q, %q) listed %q", cursor, prefix, it.Key)
			}
		}
		arts, _, err := s.ListArtifacts(ctx, "t1", page)
		if err != nil && !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("ListArtifacts(%q): %v", cursor, err)
		}
		for _, a := range arts {
			if a.TaskID != "t1" {
				t.Fatalf("ListArtifacts(%q) listed %+v", cursor, a)
			}
		}
		if _, _, err := s.ListProjects(ctx, []string{"p"}, prefix, page); err != nil && !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("ListProjects(%q): %v", cursor, err)
		}
	})
}

func openF(f *testing.F) store.Store { return openLocal(f, f.TempDir()) }
