package cynode_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/services/cynode"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
)

const forgeToken = "gitea-s3cr3t-token-7f3a"

// TestGitForgePR: git.pr.create through a Gitea-compatible forge: the
// request carries the token in its header and the pull request in its
// body; the token is in no result, error or audit record.
func TestGitForgePR(t *testing.T) {
	f := ct.StartForge(t, "gitea", forgeToken, "acme", "app")
	t.Setenv("CYNODE_TEST_GITEA_TOKEN", forgeToken)
	h, _ := startGitWith(t, func(r *cynode.GitRepo) {
		r.Provider = "gitea"
		r.Forge = &cynode.GitForge{APIURL: f.APIURL, Owner: "acme", Repo: "app", Credential: cynode.APICredential{Env: "CYNODE_TEST_GITEA_TOKEN"}}
	})
	args := func(params map[string]any) map[string]any {
		a := gitArgs("app", params)
		a["provider"] = "gitea"
		return a
	}
	for _, b := range []string{"task/t1/fix", "task/t1/other"} {
		h.OK(ct.PMAgent, "git.branch.create", args(map[string]any{"branch": b, "from": "main"}))
		h.OK(ct.PMAgent, "git.changeset.apply", args(map[string]any{"branch": b, "patch": newFile(strings.ReplaceAll(b, "/", "-")+".txt", "100644")}))
		h.OK(ct.PMAgent, "git.commit.create", args(map[string]any{"branch": b, "message": "add " + b}))
		h.OK(ct.PMAgent, "git.push", args(map[string]any{"branch": b}))
	}
	h.Fail(ct.PMAgent, "git.pr.create", gitArgs("app", map[string]any{"branch": "task/t1/fix", "base": "main", "title": "x"}), "invalid_argument")
	pr := h.OK(ct.PMAgent, "git.pr.create", args(map[string]any{"branch": "task/t1/fix", "base": "main", "title": "Add fix", "body": "Because."}))
	if pr["number"] != float64(1) || pr["url"] != "https://forge.example/acme/app/pull/1" || pr["head"] != "task/t1/fix" || pr["base"] != "main" ||
		pr["author"] != ct.PMAgent || pr["task_id"] != "t1" || pr["state"] != "open" {
		t.Fatalf("pr = %v", pr)
	}
	msg := h.Fail(ct.PMAgent, "git.pr.create", args(map[string]any{"branch": "task/t1/fix", "base": "main", "title": "again"}), "already_exists")
	if !strings.Contains(msg, "forge.example/acme/app/pull/1") {
		t.Fatalf("already open: %s", msg)
	}
	var posts int
	for _, r := range f.Requests() {
		if r.Auth != "token "+forgeToken || r.Path != "/api/v1/repos/acme/app/pulls" {
			t.Errorf("request %s %s with auth %q", r.Method, r.Path, r.Auth)
		}
		if r.Method == "POST" {
			posts++
			if r.Body["title"] != "Add fix" || r.Body["head"] != "task/t1/fix" || r.Body["base"] != "main" || r.Body["body"] != "Because." {
				t.Errorf("POST body = %v", r.Body)
			}
		}
	}
	if posts != 1 {
		t.Fatalf("%d POSTs, want 1 (the second call finds the open one)", posts)
	}
	// A forge that repeats the credential in its error: redacted.
	f.RejectCreate(true)
	msg = h.Fail(ct.PMAgent, "git.pr.create", args(map[string]any{"branch": "task/t1/other", "base": "main", "title": "Other"}), "unavailable")
	if strings.Contains(msg, forgeToken) || !strings.Contains(msg, "[redacted]") {
		t.Fatalf("forge error: %s", msg)
	}
	raw, _ := json.Marshal(pr)
	if strings.Contains(string(raw), forgeToken) || strings.Contains(h.AuditRaw(), forgeToken) {
		t.Fatal("the forge token is in a result or the audit trail")
	}
}

// TestGitCloneCleanup: a task's clone goes when the task reaches a
// terminal status, and its git calls are refused from then on.
func TestGitCloneCleanup(t *testing.T) {
	h, _ := startGit(t)
	h.OK(ct.PMAgent, "git.branch.create", gitArgs("app", map[string]any{"branch": "task/t1/fix"}))
	clone := filepath.Join(h.DataDir, "git", "work", "app", "t1")
	if _, err := os.Stat(filepath.Join(clone, ".git")); err != nil {
		t.Fatalf("no clone: %v", err)
	}
	h.OK(ct.PMAgent, "db.task.update_status", map[string]any{"task_id": "t1", "status": "running"})
	if _, err := os.Stat(clone); err != nil {
		t.Fatalf("clone removed while the task runs: %v", err)
	}
	h.OK(ct.PMAgent, "db.task.update_status", map[string]any{"task_id": "t1", "status": "completed"})
	if _, err := os.Stat(clone); !os.IsNotExist(err) {
		t.Fatalf("clone of a completed task: %v", err)
	}
	msg := h.Fail(ct.PMAgent, "git.branch.create", gitArgs("app", map[string]any{"branch": "task/t1/again"}), "conflict")
	if !strings.Contains(msg, "completed") {
		t.Fatalf("git on a completed task: %s", msg)
	}
	if _, err := os.Stat(clone); !os.IsNotExist(err) {
		t.Fatal("a refused call made the clone again")
	}
}
