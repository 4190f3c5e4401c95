package git_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/services/cynode/git"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
	"github.com/utpmesh/utpmesh/services/cynode/store"
)

var now = time.Date(2026, 11, 23, 7, 0, 0, 0, time.UTC)

const token = "ghp_s3cr3t-forge-token"

func forge(t *testing.T, kind string) (*git.Forge, *ct.FakeForge) {
	t.Helper()
	f := ct.StartForge(t, kind, token, "acme", "app")
	t.Setenv("CYNODE_TEST_FORGE_TOKEN", token)
	return git.NewForge(kind, gateway.GitForge{APIURL: f.APIURL, Owner: "acme", Repo: "app", Credential: gateway.APICredential{Env: "CYNODE_TEST_FORGE_TOKEN"}}, t.TempDir()), f
}

// providerSuite is what every Provider does.
func providerSuite(t *testing.T, p git.Provider) {
	ctx := context.Background()
	if _, ok, err := p.FindOpenPR(ctx, "app", "task/t1/fix"); err != nil || ok {
		t.Fatalf("find before create: %v, %v", ok, err)
	}
	req := git.PRRequest{Repo: "app", Head: "task/t1/fix", Base: "main", Title: "Say world", Body: "why", Author: "pm-1", TaskID: "t1"}
	pr, err := p.CreatePR(ctx, req, now)
	if err != nil {
		t.Fatal(err)
	}
	if pr.Number < 1 || pr.URL == "" || pr.State != "open" || pr.Head != req.Head || pr.Base != "main" || pr.Title != "Say world" ||
		pr.Author != "pm-1" || pr.TaskID != "t1" || pr.Repo != "app" || pr.CreatedAt.IsZero() {
		t.Fatalf("created %+v", pr)
	}
	found, ok, err := p.FindOpenPR(ctx, "app", req.Head)
	if err != nil || !ok || found.Number != pr.Number || found.Head != req.Head {
		t.Fatalf("find = %+v, %v, %v", found, ok, err)
	}
	again, err := p.CreatePR(ctx, req, now)
	if !errors.Is(err, git.ErrPRExists) || again.Number != pr.Number {
		t.Fatalf("second create of one head = %+v, %v; want ErrPRExists with the open one", again, err)
	}
	if _, ok, err := p.FindOpenPR(ctx, "app", "task/t1/other"); err != nil || ok {
		t.Fatalf("another head found: %v, %v", ok, err)
	}
	other := req
	other.Head = "task/t1/other"
	second, err := p.CreatePR(ctx, other, now)
	if err != nil || second.Number == pr.Number {
		t.Fatalf("another head = %+v, %v", second, err)
	}
}

// TestProviders runs the shared suite on every implementation.
func TestProviders(t *testing.T) {
	t.Run("local", func(t *testing.T) { providerSuite(t, &git.Local{Dir: t.TempDir()}) })
	for _, kind := range []string{gateway.ProviderGitHub, gateway.ProviderGitea} {
		t.Run(kind, func(t *testing.T) {
			p, _ := forge(t, kind)
			providerSuite(t, p)
		})
	}
}

// TestForgeRequests: what goes over the wire, per forge.
func TestForgeRequests(t *testing.T) {
	for _, tc := range []struct{ kind, auth, path string }{
		{gateway.ProviderGitHub, "Bearer " + token, "/repos/acme/app/pulls"},
		{gateway.ProviderGitea, "token " + token, "/api/v1/repos/acme/app/pulls"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			p, f := forge(t, tc.kind)
			if _, err := p.CreatePR(context.Background(), git.PRRequest{Repo: "app", Head: "task/t1/fix", Base: "main", Title: "T", Body: "B"}, now); err != nil {
				t.Fatal(err)
			}
			reqs := f.Requests()
			if len(reqs) != 2 || reqs[0].Method != "GET" || reqs[1].Method != "POST" {
				t.Fatalf("requests = %+v, want a GET (find) then a POST", reqs)
			}
			for _, r := range reqs {
				if r.Auth != tc.auth || r.Path != tc.path {
					t.Errorf("%s %s auth %q, want %s %q", r.Method, r.Path, r.Auth, tc.path, tc.auth)
				}
			}
			if q := reqs[0].Query; q["state"][0] != "open" || (tc.kind == gateway.ProviderGitHub && q["head"][0] != "acme:task/t1/fix") {
				t.Errorf("find query = %v", q)
			}
			b := reqs[1].Body
			if b["title"] != "T" || b["head"] != "task/t1/fix" || b["base"] != "main" || b["body"] != "B" || len(b) != 4 {
				t.Errorf("create body = %v", b)
			}
			if f.Contains(token) {
				t.Error("the token travelled outside the Authorization header")
			}
		})
	}
}

// TestForgeToken: a missing token sends nothing; a bad one is the forge's
// refusal; a forge that repeats the token in an error shows [redacted].
func TestForgeToken(t *testing.T) {
	ctx := context.Background()
	req := git.PRRequest{Repo: "app", Head: "task/t1/fix", Base: "main", Title: "T"}
	f := ct.StartForge(t, gateway.ProviderGitHub, token, "acme", "app")
	cfg := gateway.GitForge{APIURL: f.APIURL, Owner: "acme", Repo: "app", Credential: gateway.APICredential{Env: "CYNODE_TEST_UNSET_TOKEN"}}
	_, err := git.NewForge(gateway.ProviderGitHub, cfg, t.TempDir()).CreatePR(ctx, req, now)
	if !errors.Is(err, git.ErrNoToken) || !strings.Contains(err.Error(), "CYNODE_TEST_UNSET_TOKEN") || len(f.Requests()) != 0 {
		t.Fatalf("unset token: %v (%d requests)", err, len(f.Requests()))
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "forge.token"), []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Credential = gateway.APICredential{File: "forge.token"}
	_, err = git.NewForge(gateway.ProviderGitHub, cfg, dir).CreatePR(ctx, req, now)
	if err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("wrong token: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "forge.token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.RejectCreate(true)
	_, err = git.NewForge(gateway.ProviderGitHub, cfg, dir).CreatePR(ctx, req, now)
	if err == nil || strings.Contains(err.Error(), token) || !strings.Contains(err.Error(), "[redacted]") || !strings.Contains(err.Error(), "422") {
		t.Fatalf("careless forge: %v", err)
	}
}

// TestRemoveTerminalClones: at start, the clones of finished tasks go,
// the others stay; a task id that is no directory name removes nothing.
func TestRemoveTerminalClones(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	st, err := store.OpenLocal(filepath.Join(data, "cynode-state.db"), filepath.Join(data, "blobs"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for id, status := range map[string]string{"t-done": store.StatusCompleted, "t-failed": store.StatusFailed, "t-run": store.StatusRunning} {
		if err := st.PutTask(ctx, store.Task{ID: id, ProjectID: "demo", Status: status}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"app/t-done", "app/t-run", "lib/t-failed", "lib/t-unknown"} {
		if err := os.MkdirAll(filepath.Join(data, "git", "work", p, ".git"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s, err := git.New(gateway.GitConfig{Repos: map[string]gateway.GitRepo{"app": {Path: "/srv/app.git", Project: "demo"}}}, data)
	if err != nil {
		t.Fatal(err)
	}
	removed, err := s.RemoveTerminalClones(ctx, st)
	if err != nil || strings.Join(removed, ",") != "t-done,t-failed" {
		t.Fatalf("removed %v, %v", removed, err)
	}
	for p, want := range map[string]bool{"app/t-done": false, "lib/t-failed": false, "app/t-run": true, "lib/t-unknown": true} {
		if _, err := os.Stat(filepath.Join(data, "git", "work", p)); (err == nil) != want {
			t.Errorf("%s exists = %v, want %v", p, err == nil, want)
		}
	}
	if err := s.RemoveClones(".."); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(data, "git", "work", "app", "t-run")); err != nil {
		t.Fatalf("RemoveClones(\"..\") removed something: %v", err)
	}
}

// TestForgeNoRedirect: a forge answering with a redirect is an error, and
// the token is not carried to the redirect's target.
func TestForgeNoRedirect(t *testing.T) {
	var hit atomic.Bool
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit.Store(true) }))
	defer target.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	t.Setenv("CYNODE_TEST_FORGE_TOKEN", token)
	p := git.NewForge(gateway.ProviderGitHub, gateway.GitForge{APIURL: srv.URL, Owner: "acme", Repo: "app", Credential: gateway.APICredential{Env: "CYNODE_TEST_FORGE_TOKEN"}}, t.TempDir())
	_, err := p.CreatePR(context.Background(), git.PRRequest{Repo: "app", Head: "task/t1/fix", Base: "main", Title: "T"}, now)
	if err == nil || !strings.Contains(err.Error(), "307") || hit.Load() {
		t.Fatalf("redirect: %v (target reached: %v)", err, hit.Load())
	}
}
