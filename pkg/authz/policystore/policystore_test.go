package policystore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cedar-policy/cedar-go/types"
	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/internal/boltfile"
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
		{"syntax", "permit(principal, action, resource);\nforbid(principal action);", "line 2, column 18"},
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

// actionList is an authz.ActionSource with fixed actions per project.
type actionList map[string][]types.EntityUID

func (a actionList) Actions(_ context.Context, project string) ([]types.EntityUID, error) {
	return a[project], nil
}

// TestStoreActions checks that with WithActions a policy naming an action
// no tool of the project has is refused before anything is stored.
func TestStoreActions(t *testing.T) {
	ctx := context.Background()
	src := actionList{"demo": {types.NewEntityUID("ATLASAction", "TASK_LIST")}}
	s, err := policystore.Open(filepath.Join(t.TempDir(), "policies.db"), policystore.WithActions(src))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tests := []struct {
		name, project, text, want string
	}{
		{"typo", "demo", `permit(principal, action == ATLASAction::"TASK_LST", resource);`, `did you mean ATLASAction::"TASK_LIST"?`},
		{"other project has no tools", "other", `permit(principal, action == ATLASAction::"TASK_LIST", resource);`, "unknown action"},
		{"ok", "demo", `permit(principal, action == ATLASAction::"TASK_LIST", resource);`, ""},
		{"ATP actions always known", "other", `permit(principal, action == ATPAction::"get_booking_status", resource);`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.PutPolicies(ctx, tc.project, tc.text)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, authz.ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if doc, err := s.Policies(ctx, "demo"); err != nil || doc.Version != 1 {
		t.Fatalf("after a refused typo and one good put: %+v, %v", doc, err)
	}
}

func policy(i int) string {
	return fmt.Sprintf("@id(\"v%d\") permit(principal, action == Action::\"echo\", resource);\n", i)
}

// TestStoreHistory checks versions, the history limit, identical puts,
// the base-version check and rollback, across a reopen.
func TestStoreHistory(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "policies.db")
	s, err := policystore.Open(path, policystore.WithHistoryLimit(3))
	if err != nil {
		t.Fatal(err)
	}
	if h, err := s.History(ctx, "demo"); err != nil || len(h) != 0 {
		t.Fatalf("empty history = %v, %v", h, err)
	}
	if _, err := s.ReplacePolicies(ctx, "demo", policy(1), 5); !errors.Is(err, authz.ErrConflict) {
		t.Fatalf("replace with a wrong base = %v", err)
	}
	for i := 1; i <= 4; i++ {
		doc, err := s.ReplacePolicies(ctx, "demo", policy(i), uint64(i-1))
		if err != nil || doc.Version != uint64(i) {
			t.Fatalf("put %d: %+v, %v", i, doc, err)
		}
	}
	if doc, err := s.PutPolicies(ctx, "demo", policy(4)); err != nil || doc.Version != 4 {
		t.Fatalf("identical put: %+v, %v (want version 4 unchanged)", doc, err)
	}
	if _, err := s.ReplacePolicies(ctx, "demo", policy(9), 3); !errors.Is(err, authz.ErrConflict) || !strings.Contains(err.Error(), "version 4, not 3") {
		t.Fatalf("stale base = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = policystore.Open(path, policystore.WithHistoryLimit(3)); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h, err := s.History(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range h {
		got = append(got, fmt.Sprintf("%d:%v", v.Version, v.Current))
		if v.Bytes != len(policy(int(v.Version))) || v.SHA256 == "" || v.UpdatedAt.IsZero() {
			t.Fatalf("version %+v", v)
		}
	}
	if strings.Join(got, " ") != "4:true 3:false 2:false" {
		t.Fatalf("history = %v, want 4 (current), 3, 2", got)
	}
	if _, err := s.PolicyVersion(ctx, "demo", 1); !errors.Is(err, authz.ErrNotFound) || !strings.Contains(err.Error(), "not kept") {
		t.Fatalf("dropped version = %v", err)
	}
	if d, err := s.PolicyVersion(ctx, "demo", 2); err != nil || d.Policies != policy(2) {
		t.Fatalf("version 2 = %+v, %v", d, err)
	}
	if _, err := s.Rollback(ctx, "demo", 2, 3); !errors.Is(err, authz.ErrConflict) {
		t.Fatalf("rollback with a stale base = %v", err)
	}
	doc, err := s.Rollback(ctx, "demo", 2, 4)
	if err != nil || doc.Version != 5 || doc.RolledBackFrom != 2 || doc.Policies != policy(2) {
		t.Fatalf("rollback = %+v, %v", doc, err)
	}
	if cur, err := s.Policies(ctx, "demo"); err != nil || cur.Version != 5 || cur.Policies != policy(2) {
		t.Fatalf("current after rollback = %+v, %v", cur, err)
	}
	if h, _ := s.History(ctx, "demo"); len(h) != 3 || h[0].Version != 5 || h[0].RolledBackFrom != 2 || !h[0].Current {
		t.Fatalf("history after rollback = %+v", h)
	}
	if _, err := s.PolicyVersion(ctx, "demo", 0); !errors.Is(err, authz.ErrInvalidRequest) {
		t.Fatalf("version 0 = %v", err)
	}
}

// TestOpenUnversioned: a policies.db written before the layout had a
// schema version (three buckets, no meta) opens with its data.
func TestOpenUnversioned(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "policies.db")
	s, err := policystore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutPolicies(ctx, "demo", `permit(principal, action == Action::"echo", resource);`); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Make it an old file: drop the meta bucket.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(boltfile.MetaBucket) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = policystore.Open(path)
	if err != nil {
		t.Fatalf("open of an unversioned file: %v", err)
	}
	defer s.Close()
	if _, err := s.Policies(ctx, "demo"); err != nil {
		t.Fatalf("policies after adopting the file: %v", err)
	}
}
