// Package policystoretest is the conformance suite of the
// policystore.Store contract, run by both backends, the bbolt boltpolicy
// and the JetStream KV jspolicy, and by natspolicy's Client over the authz
// service (a boltpolicy store behind natsauthz on a real nats-server).
// Each store's tests call Run:
//
//	func TestConformance(t *testing.T) {
//		policystoretest.Run(t, func(t *testing.T) policystoretest.Opener {
//			path := filepath.Join(t.TempDir(), "policies.db")
//			return func(t *testing.T, cfg policystoretest.Config) policystore.Store {
//				return open(t, path, cfg)
//			}
//		})
//	}
//
// newStorage must return an Opener of fresh, empty storage per call; every
// call of that Opener opens the same storage again (the suite closes a
// store before it reopens it, to check that what was acknowledged is
// still there). The Opener arranges cleanup with t.Cleanup. For a client
// of a remote store, "reopen" is a new client: its Opener stops the
// previous service, closes and reopens the storage with cfg and serves it
// again, so the suite checks what the service acknowledged was stored.
package policystoretest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cedar-policy/cedar-go/types"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore"
)

// Config is what the suite opens a store with.
type Config struct {
	// Actions, when set, is the store's action source (boltpolicy's
	// WithActions, jspolicy's Config.Actions): policies naming other actions are refused.
	Actions authz.ActionSource
	// HistoryLimit is how many versions to keep; 0 means the store's
	// default, which must be DefaultHistoryLimit.
	HistoryLimit int
}

// DefaultHistoryLimit is the number of versions every store keeps by
// default.
const DefaultHistoryLimit = policystore.HistoryLimit

// Opener opens the storage it was made for with cfg.
type Opener func(t *testing.T, cfg Config) policystore.Store

// Policy returns a valid policy text, different for each i.
func Policy(i int) string {
	return fmt.Sprintf("@id(\"v%d\") permit(principal, action == Action::\"echo\", resource);\n", i)
}

// actionList is an authz.ActionSource with fixed actions per project.
type actionList map[string][]types.EntityUID

func (a actionList) Actions(_ context.Context, project string) ([]types.EntityUID, error) {
	return a[project], nil
}

// Win is one write that Race stored: attempt I's document.
type Win struct {
	I   int
	Doc *authz.PolicyDoc
}

// Race runs attempt(0) .. attempt(n-1) at once and returns the writes that
// were stored. A write refused with authz.ErrConflict lost the race; any
// other error fails t.
func Race(t testing.TB, n int, attempt func(i int) (*authz.PolicyDoc, error)) []Win {
	t.Helper()
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		won []Win
	)
	for i := range n {
		wg.Go(func() {
			doc, err := attempt(i)
			switch {
			case err == nil:
				mu.Lock()
				won = append(won, Win{I: i, Doc: doc})
				mu.Unlock()
			case !errors.Is(err, authz.ErrConflict):
				t.Errorf("attempt %d: %v, want nil or ErrConflict", i, err)
			}
		})
	}
	wg.Wait()
	return won
}

// Run runs the suite.
func Run(t *testing.T, newStorage func(t *testing.T) Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"PutGetConfig", testPutGetConfig},
		{"Actions", testActions},
		{"History", testHistory},
		{"DefaultHistoryLimit", testDefaultHistoryLimit},
		{"ConcurrentReplace", testConcurrentReplace},
		{"ConcurrentPut", testConcurrentPut},
		{"ConcurrentRollback", testConcurrentRollback},
		{"ProjectIsolation", testIsolation},
		{"BadInput", testBadInput},
		{"Canceled", testCanceled},
		{"Closed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStorage(t)) })
	}
}

// reopen closes s and opens the storage again.
func reopen(t *testing.T, s policystore.Store, open Opener, cfg Config) policystore.Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return open(t, cfg)
}

func testPutGetConfig(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t, Config{})
	if _, err := s.Policies(ctx, "demo"); !errors.Is(err, authz.ErrNotFound) || !strings.Contains(err.Error(), "utpmesh policy put --project demo") {
		t.Fatalf("missing policies = %v, want ErrNotFound saying how to put them", err)
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
				t.Fatalf("%s: err = %v, want ErrInvalidPolicy naming %q", tc.name, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if doc.SHA256 == "" || doc.Policies != tc.text || doc.Project != "demo" || doc.UpdatedAt.IsZero() {
			t.Fatalf("%s: doc = %+v", tc.name, doc)
		}
	}
	if err := s.PutConfig(ctx, "demo", authz.ProjectConfig{Mandate: "off"}); !errors.Is(err, authz.ErrInvalidRequest) {
		t.Fatalf("bad config = %v, want ErrInvalidRequest", err)
	}
	if err := s.PutConfig(ctx, "demo", authz.ProjectConfig{Mandate: authz.MandateNotRequired}); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, open, Config{})
	doc, err := s.Policies(ctx, "demo")
	if err != nil || doc.Version != 2 || !strings.Contains(doc.Policies, `@id("e")`) {
		t.Fatalf("after reopen: %+v, %v; want version 2", doc, err)
	}
	if c, err := s.Config(ctx, "demo"); err != nil || c.Required() {
		t.Fatalf("config after reopen = %+v, %v", c, err)
	}
	// An empty mode is stored as required.
	if err := s.PutConfig(ctx, "demo", authz.ProjectConfig{}); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Config(ctx, "demo"); err != nil || c.Mandate != authz.MandateRequired {
		t.Fatalf("config after putting the zero config = %+v, %v", c, err)
	}
}

// alwaysKnown is a catalogue whose actions every project knows without a
// tool that has them, as ATP's are.
type alwaysKnown struct{}

func (alwaysKnown) Name() string { return "policystoretest" }

func (alwaysKnown) Schema() authz.SchemaFragment {
	return authz.SchemaFragment{Actions: []string{`TestCatalogueAction::"status"`}}
}

func (alwaysKnown) ResolveResource(context.Context, authz.ResourceRequest) (*authz.Resource, error) {
	return nil, nil
}

// testActions: with an action source, a policy naming an action no tool
// of the project has is refused before anything is stored; a registered
// catalogue's actions are always known.
func testActions(t *testing.T, open Opener) {
	ctx := context.Background()
	authz.RegisterCatalogue(alwaysKnown{})
	t.Cleanup(func() { authz.UnregisterCatalogue(alwaysKnown{}.Name()) })
	s := open(t, Config{Actions: actionList{"demo": {types.NewEntityUID("TicketAction", "LIST_TICKETS")}}})
	tests := []struct {
		name, project, text, want string
	}{
		{"typo", "demo", `permit(principal, action == TicketAction::"LIST_TICKET", resource);`, `did you mean TicketAction::"LIST_TICKETS"?`},
		{"other project has no tools", "other", `permit(principal, action == TicketAction::"LIST_TICKETS", resource);`, "unknown action"},
		{"ok", "demo", `permit(principal, action == TicketAction::"LIST_TICKETS", resource);`, ""},
		{"catalogue actions always known", "other", `permit(principal, action == TestCatalogueAction::"status", resource);`, ""},
	}
	for _, tc := range tests {
		_, err := s.PutPolicies(ctx, tc.project, tc.text)
		if tc.want == "" {
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, authz.ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	if doc, err := s.Policies(ctx, "demo"); err != nil || doc.Version != 1 {
		t.Fatalf("after a refused typo and one good put: %+v, %v", doc, err)
	}
}

// testHistory checks versions, the history limit, identical puts, the
// base-version check and rollback, across a reopen.
func testHistory(t *testing.T, open Opener) {
	ctx := context.Background()
	cfg := Config{HistoryLimit: 3}
	s := open(t, cfg)
	if h, err := s.History(ctx, "demo"); err != nil || len(h) != 0 {
		t.Fatalf("empty history = %v, %v", h, err)
	}
	if _, err := s.ReplacePolicies(ctx, "demo", Policy(1), 5); !errors.Is(err, authz.ErrConflict) {
		t.Fatalf("replace with a wrong base = %v", err)
	}
	if _, err := s.Rollback(ctx, "demo", 1, 0); !errors.Is(err, authz.ErrNotFound) {
		t.Fatalf("rollback without any version = %v", err)
	}
	for i := 1; i <= 4; i++ {
		doc, err := s.ReplacePolicies(ctx, "demo", Policy(i), uint64(i-1))
		if err != nil || doc.Version != uint64(i) {
			t.Fatalf("put %d: %+v, %v", i, doc, err)
		}
	}
	if doc, err := s.PutPolicies(ctx, "demo", Policy(4)); err != nil || doc.Version != 4 {
		t.Fatalf("identical put: %+v, %v (want version 4 unchanged)", doc, err)
	}
	if doc, err := s.ReplacePolicies(ctx, "demo", Policy(4), 4); err != nil || doc.Version != 4 {
		t.Fatalf("identical replace: %+v, %v (want version 4 unchanged)", doc, err)
	}
	if _, err := s.ReplacePolicies(ctx, "demo", Policy(9), 3); !errors.Is(err, authz.ErrConflict) || !strings.Contains(err.Error(), "version 4, not 3") {
		t.Fatalf("stale base = %v", err)
	}
	s = reopen(t, s, open, cfg)
	h, err := s.History(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range h {
		got = append(got, fmt.Sprintf("%d:%v", v.Version, v.Current))
		if v.Bytes != len(Policy(int(v.Version))) || v.SHA256 == "" || v.UpdatedAt.IsZero() {
			t.Fatalf("version %+v", v)
		}
	}
	if strings.Join(got, " ") != "4:true 3:false 2:false" {
		t.Fatalf("history = %v, want 4 (current), 3, 2", got)
	}
	if _, err := s.PolicyVersion(ctx, "demo", 1); !errors.Is(err, authz.ErrNotFound) || !strings.Contains(err.Error(), "not kept") {
		t.Fatalf("dropped version = %v", err)
	}
	if d, err := s.PolicyVersion(ctx, "demo", 2); err != nil || d.Policies != Policy(2) || d.Version != 2 {
		t.Fatalf("version 2 = %+v, %v", d, err)
	}
	if d, err := s.PolicyVersion(ctx, "demo", 4); err != nil || d.Policies != Policy(4) {
		t.Fatalf("current version 4 = %+v, %v", d, err)
	}
	if _, err := s.Rollback(ctx, "demo", 2, 3); !errors.Is(err, authz.ErrConflict) {
		t.Fatalf("rollback with a stale base = %v", err)
	}
	if _, err := s.Rollback(ctx, "demo", 1, 4); !errors.Is(err, authz.ErrNotFound) {
		t.Fatalf("rollback to a dropped version = %v", err)
	}
	doc, err := s.Rollback(ctx, "demo", 2, 4)
	if err != nil || doc.Version != 5 || doc.RolledBackFrom != 2 || doc.Policies != Policy(2) {
		t.Fatalf("rollback = %+v, %v", doc, err)
	}
	if cur, err := s.Policies(ctx, "demo"); err != nil || cur.Version != 5 || cur.Policies != Policy(2) || cur.RolledBackFrom != 2 {
		t.Fatalf("current after rollback = %+v, %v", cur, err)
	}
	if h, _ := s.History(ctx, "demo"); len(h) != 3 || h[0].Version != 5 || h[0].RolledBackFrom != 2 || !h[0].Current || h[1].Current {
		t.Fatalf("history after rollback = %+v", h)
	}
}

// testDefaultHistoryLimit: without a limit, the last DefaultHistoryLimit
// versions are kept.
func testDefaultHistoryLimit(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t, Config{})
	const n = DefaultHistoryLimit + 3
	for i := 1; i <= n; i++ {
		if _, err := s.PutPolicies(ctx, "demo", Policy(i)); err != nil {
			t.Fatal(err)
		}
	}
	h, err := s.History(ctx, "demo")
	if err != nil || len(h) != DefaultHistoryLimit || h[0].Version != n || h[len(h)-1].Version != n-DefaultHistoryLimit+1 {
		t.Fatalf("history = %d versions (%v), want %d..%d", len(h), err, n-DefaultHistoryLimit+1, n)
	}
	if _, err := s.PolicyVersion(ctx, "demo", n-DefaultHistoryLimit); !errors.Is(err, authz.ErrNotFound) {
		t.Fatalf("version beyond the limit = %v", err)
	}
}

// testConcurrentReplace: of concurrent replacements confirmed against the
// same version, exactly one is stored; the others get ErrConflict.
func testConcurrentReplace(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t, Config{})
	if _, err := s.PutPolicies(ctx, "demo", Policy(0)); err != nil {
		t.Fatal(err)
	}
	const n = 8
	won := Race(t, n, func(i int) (*authz.PolicyDoc, error) { return s.ReplacePolicies(ctx, "demo", Policy(i+1), 1) })
	if len(won) != 1 {
		t.Fatalf("%d of %d replacements based on version 1 were stored, want 1", len(won), n)
	}
	if won[0].Doc.Version != 2 {
		t.Errorf("winner stored version %d, want 2", won[0].Doc.Version)
	}
	winner := won[0].I + 1
	cur, err := s.Policies(ctx, "demo")
	if err != nil || cur.Version != 2 || cur.Policies != Policy(winner) {
		t.Fatalf("current = %+v, %v; want the winner's text as version 2", cur, err)
	}
}

// testConcurrentPut: concurrent puts without a base all land, one version
// each, none lost.
func testConcurrentPut(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t, Config{})
	const n = 10
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Go(func() {
			if _, err := s.PutPolicies(ctx, "demo", Policy(i)); err != nil {
				t.Errorf("put %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	h, err := s.History(ctx, "demo")
	if err != nil || len(h) != n || h[0].Version != n {
		t.Fatalf("history = %+v, %v; want versions 1..%d", h, err, n)
	}
	var texts []string
	for v := uint64(1); v <= n; v++ {
		d, err := s.PolicyVersion(ctx, "demo", v)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, d.Policies)
	}
	slices.Sort(texts)
	if len(slices.Compact(texts)) != n {
		t.Fatalf("the %d versions hold %d distinct texts: a put was lost", n, len(texts))
	}
}

// testConcurrentRollback: concurrent rollbacks against the same base store
// one new version.
func testConcurrentRollback(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t, Config{})
	for i := 1; i <= 3; i++ {
		if _, err := s.PutPolicies(ctx, "demo", Policy(i)); err != nil {
			t.Fatal(err)
		}
	}
	const n = 6
	won := Race(t, n, func(i int) (*authz.PolicyDoc, error) { return s.Rollback(ctx, "demo", uint64(1+i%2), 3) })
	cur, err := s.Policies(ctx, "demo")
	if len(won) != 1 || err != nil || cur.Version != 4 || cur.Policies != Policy(int(cur.RolledBackFrom)) {
		t.Fatalf("%d rollbacks won; current %+v, %v; want one, as version 4", len(won), cur, err)
	}
}

// testIsolation: projects whose names share a prefix keep apart.
func testIsolation(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t, Config{})
	for i, p := range []string{"p", "p-1", "p_"} {
		for j := 0; j <= i; j++ {
			if _, err := s.PutPolicies(ctx, p, Policy(10*i+j)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.PutConfig(ctx, "p-1", authz.ProjectConfig{Mandate: authz.MandateNotRequired}); err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{"p", "p-1", "p_"} {
		h, err := s.History(ctx, p)
		if err != nil || len(h) != i+1 {
			t.Fatalf("history of %s = %+v, %v; want %d versions", p, h, err, i+1)
		}
		d, err := s.Policies(ctx, p)
		if err != nil || d.Project != p || d.Policies != Policy(10*i+i) {
			t.Fatalf("policies of %s = %+v, %v", p, d, err)
		}
		c, err := s.Config(ctx, p)
		if err != nil || c.Required() != (p != "p-1") {
			t.Fatalf("config of %s = %+v, %v", p, c, err)
		}
	}
}

func testBadInput(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t, Config{})
	for _, p := range []string{"", "bad project", "a.b", "*"} {
		calls := map[string]error{}
		_, calls["Policies"] = s.Policies(ctx, p)
		_, calls["Config"] = s.Config(ctx, p)
		_, calls["PutPolicies"] = s.PutPolicies(ctx, p, Policy(1))
		calls["PutConfig"] = s.PutConfig(ctx, p, authz.ProjectConfig{})
		_, calls["ReplacePolicies"] = s.ReplacePolicies(ctx, p, Policy(1), 0)
		_, calls["History"] = s.History(ctx, p)
		_, calls["PolicyVersion"] = s.PolicyVersion(ctx, p, 1)
		_, calls["Rollback"] = s.Rollback(ctx, p, 1, 0)
		for name, err := range calls {
			if !errors.Is(err, authz.ErrInvalidRequest) || !strings.Contains(err.Error(), "project_id") {
				t.Errorf("%s(%q) = %v, want ErrInvalidRequest naming project_id", name, p, err)
			}
		}
	}
	if _, err := s.PolicyVersion(ctx, "demo", 0); !errors.Is(err, authz.ErrInvalidRequest) {
		t.Errorf("version 0 = %v", err)
	}
	if _, err := s.PolicyVersion(ctx, "demo", 1); !errors.Is(err, authz.ErrNotFound) {
		t.Errorf("version of a project without policies = %v", err)
	}
	big := "// " + strings.Repeat("x", 256<<10) + "\n" + Policy(1)
	if _, err := s.PutPolicies(ctx, "demo", big); !errors.Is(err, authz.ErrInvalidPolicy) || !strings.Contains(err.Error(), "limit") {
		t.Errorf("oversized policies = %v", err)
	}
	if _, err := s.Policies(ctx, "demo"); !errors.Is(err, authz.ErrNotFound) {
		t.Errorf("a refused put stored something: %v", err)
	}
}

func testCanceled(t *testing.T, open Opener) {
	s := open(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Policies(ctx, "demo"); !errors.Is(err, context.Canceled) {
		t.Errorf("Policies = %v, want context.Canceled", err)
	}
	if _, err := s.PutPolicies(ctx, "demo", Policy(1)); !errors.Is(err, context.Canceled) {
		t.Errorf("PutPolicies = %v, want context.Canceled", err)
	}
	if err := s.PutConfig(ctx, "demo", authz.ProjectConfig{}); !errors.Is(err, context.Canceled) {
		t.Errorf("PutConfig = %v, want context.Canceled", err)
	}
}

func testClosed(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t, Config{})
	if _, err := s.PutPolicies(ctx, "demo", Policy(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Policies(ctx, "demo"); !errors.Is(err, authz.ErrClosed) {
		t.Errorf("Policies after Close = %v", err)
	}
	if _, err := s.Config(ctx, "demo"); !errors.Is(err, authz.ErrClosed) {
		t.Errorf("Config after Close = %v", err)
	}
	if _, err := s.PutPolicies(ctx, "demo", Policy(2)); !errors.Is(err, authz.ErrClosed) {
		t.Errorf("PutPolicies after Close = %v", err)
	}
	if _, err := s.History(ctx, "demo"); !errors.Is(err, authz.ErrClosed) {
		t.Errorf("History after Close = %v", err)
	}
}
