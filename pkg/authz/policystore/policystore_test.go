package policystore_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore"
)

func TestStore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "policies.db")
	s, err := policystore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Policies(ctx, "demo"); !errors.Is(err, authz.ErrNotFound) {
		t.Fatalf("missing = %v", err)
	}
	if c, err := s.Config(ctx, "demo"); err != nil || !c.Required() || c.Mandate != authz.MandateRequired {
		t.Fatalf("default config = %+v, %v", c, err)
	}
	tests := []struct {
		name, text, want string
	}{
		{"syntax", "permit(principal, action, resource);\nforbid(principal action);", ":2:"},
		{"schema", `permit(principal, action, resource) when { context.nope == 1 };`, "nope"},
		{"ok", `permit(principal, action == Action::"echo", resource);`, ""},
		{"ok again", `@id("e") permit(principal, action == Action::"echo", resource);`, ""},
	}
	for _, tc := range tests {
		doc, err := s.PutPolicies(ctx, "demo", tc.text)
		if tc.want != "" {
			if !errors.Is(err, authz.ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s: err = %v", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if doc.SHA256 == "" || doc.Policies != tc.text {
			t.Fatalf("%s: doc = %+v", tc.name, doc)
		}
	}
	if err := s.PutConfig(ctx, "demo", authz.ProjectConfig{Mandate: "off"}); !errors.Is(err, authz.ErrInvalidRequest) {
		t.Fatalf("bad config = %v", err)
	}
	if err := s.PutConfig(ctx, "demo", authz.ProjectConfig{Mandate: authz.MandateNotRequired}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = policystore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	doc, err := s.Policies(ctx, "demo")
	if err != nil || doc.Version != 2 || !strings.Contains(doc.Policies, `@id("e")`) {
		t.Fatalf("after reopen: %+v, %v", doc, err)
	}
	if c, _ := s.Config(ctx, "demo"); c.Required() {
		t.Fatalf("config after reopen = %+v", c)
	}
	if _, err := s.Policies(ctx, "bad project"); !errors.Is(err, authz.ErrInvalidRequest) {
		t.Fatalf("bad project = %v", err)
	}
}
