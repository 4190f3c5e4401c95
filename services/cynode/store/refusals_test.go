package store_test

import (
	"fmt"
	"testing"

	"github.com/utpmesh/utpmesh/services/cynode/store"
)

func TestProjectSlugChange(t *testing.T) {
	each(t, func(t *testing.T, s store.Store) {
		if err := s.PutProject(ctx, store.Project{ID: "p1", Slug: "old"}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutProject(ctx, store.Project{ID: "p1", Slug: "new"}); err != nil {
			t.Fatal(err)
		}
		if p, err := s.GetProjectBySlug(ctx, "new"); err != nil || p.ID != "p1" {
			t.Fatalf("by the new slug: %+v, %v", p, err)
		}
		_, err := s.GetProjectBySlug(ctx, "old")
		wantErr(t, "by the old slug", err, store.ErrNotFound, `slug "old"`)
		if err := s.PutProject(ctx, store.Project{ID: "p2", Slug: "old"}); err != nil {
			t.Fatalf("another project taking the freed slug: %v", err)
		}
		if p, err := s.GetProjectBySlug(ctx, "old"); err != nil || p.ID != "p2" {
			t.Fatalf("the freed slug: %+v, %v", p, err)
		}
	})
}
func TestListLimit(t *testing.T) {
	each(t, func(t *testing.T, s store.Store) {
		if err := s.PutProject(ctx, store.Project{ID: "p1", Slug: "p1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateSetting(ctx, store.SystemScope, store.Setting{Key: "k", Value: 1}, store.Write{At: at}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutArtifact(ctx, "t1", "a", []byte("x"), at); err != nil {
			t.Fatal(err)
		}
		if err := s.PutSkill(ctx, store.Skill{ID: "s1"}); err != nil {
			t.Fatal(err)
		}
		all := func(store.Skill) bool { return true }
		for _, limit := range []int{0, -1} {
			for name, list := range map[string]func(store.Page) error{
				"projects":  func(p store.Page) error { _, _, err := s.ListProjects(ctx, []string{"p1"}, "", p); return err },
				"settings":  func(p store.Page) error { _, _, err := s.ListSettings(ctx, store.SystemScope, "", p); return err },
				"artifacts": func(p store.Page) error { _, _, err := s.ListArtifacts(ctx, "t1", p); return err },
				"skills":    func(p store.Page) error { _, _, err := s.ListSkills(ctx, all, p); return err },
			} {
				wantErr(t, fmt.Sprintf("%s limit %d", name, limit), list(store.Page{Limit: limit}), store.ErrInvalid, "limit")
			}
		}
	})
}
func TestArtifactRefusals(t *testing.T) {
	each(t, func(t *testing.T, s store.Store) {
		for _, tc := range []struct {
			name, task, path string
			says             string
		}{
			{"no task", "", "a", "task_id"},
			{"no path", "t1", "", "path"},
			{"NUL in the task", "t1\x00x", "a", "NUL"},
		} {
			_, err := s.PutArtifact(ctx, tc.task, tc.path, []byte("x"), at)
			wantErr(t, tc.name, err, store.ErrInvalid, tc.says)
		}
		if arts, _, err := s.ListArtifacts(ctx, "t1", store.Page{Limit: 10}); err != nil || len(arts) != 0 {
			t.Fatalf("t1 lists %v, %v", arts, err)
		}
	})
}
func TestSettingRefusals(t *testing.T) {
	each(t, func(t *testing.T, s store.Store) {
		for _, tc := range []struct {
			name string
			sc   store.Scope
			key  string
			says string
		}{
			{"NUL in the scope id", store.Scope{Type: "user", ID: "alice\x00x"}, "k", "NUL"},
			{"NUL in the key", store.Scope{Type: "user", ID: "alice"}, "x\x00k", "NUL"},
			{"empty key", store.SystemScope, "", "key"},
		} {
			_, err := s.CreateSetting(ctx, tc.sc, store.Setting{Key: tc.key, Value: 1}, store.Write{At: at})
			wantErr(t, tc.name+": create", err, store.ErrInvalid, tc.says)
			_, err = s.UpdateSetting(ctx, tc.sc, store.Setting{Key: tc.key, Value: 1}, store.Write{At: at})
			wantErr(t, tc.name+": update", err, store.ErrInvalid, tc.says)
		}
		if items, _, err := s.ListSettings(ctx, store.Scope{Type: "user", ID: "alice"}, "", store.Page{Limit: 10}); err != nil || len(items) != 0 {
			t.Fatalf("alice lists %v, %v", items, err)
		}
	})
}
