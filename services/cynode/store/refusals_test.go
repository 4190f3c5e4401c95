package store_test

import (
	"testing"

	"github.com/utpmesh/utpmesh/services/cynode/store"
)
func TestProjectSlugChange(t *testing.T) {
	s := open(t)
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
}
