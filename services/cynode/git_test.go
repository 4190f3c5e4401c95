package cynode_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/services/cynode"
	"github.com/utpmesh/utpmesh/services/cynode/audit"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
)

// needGit skips without the git binary, unless UTPMESH_REQUIRE_GIT=1
// (make test), where a missing git fails the test.
func needGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("UTPMESH_REQUIRE_GIT") == "1" {
			t.Fatal("git is not installed and UTPMESH_REQUIRE_GIT=1: run make test-deps (apt-get install -y git)")
		}
		t.Skip("git is not installed: the git.* tools run the git binary (make test-deps installs it)")
	}
}

func gitCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=op", "GIT_AUTHOR_EMAIL=op@example.org", "GIT_COMMITTER_NAME=op", "GIT_COMMITTER_EMAIL=op@example.org")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// startGit registers a bare repository (main holds README.md "hello")
// for project demo, and the same one as "theirs" for another project.
func startGit(t *testing.T) (*ct.Harness, string) {
	t.Helper()
	return startGitWith(t, nil)
}

// startGitWith is startGit with the repository "app" changed by mutate.
func startGitWith(t *testing.T, mutate func(*cynode.GitRepo)) (*ct.Harness, string) {
	t.Helper()
	needGit(t)
	dir := t.TempDir()
	origin := filepath.Join(dir, "origin.git")
	gitCmd(t, dir, "init", "--quiet", "--bare", "-b", "main", origin)
	seedDir := filepath.Join(dir, "seed")
	gitCmd(t, dir, "clone", "--quiet", origin, seedDir)
	if err := os.WriteFile(filepath.Join(seedDir, "README.md"), []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gitCmd(t, seedDir, "add", "README.md")
	gitCmd(t, seedDir, "commit", "--quiet", "-m", "initial")
	gitCmd(t, seedDir, "push", "--quiet", "origin", "HEAD:refs/heads/main")

	cfg := ct.Config()
	cfg.Allowlists = map[gateway.AgentType][]string{
		cynode.PM:      append(append([]string{}, gateway.DefaultAllowlists[gateway.PM]...), "git.*"),
		cynode.Sandbox: append(append([]string{}, gateway.DefaultAllowlists[gateway.Sandbox]...), "git.*"),
	}
	app := cynode.GitRepo{Path: origin, Project: ct.Project}
	if mutate != nil {
		mutate(&app)
	}
	cfg.Git = cynode.GitConfig{MaxPatchBytes: 4096, MaxPatchPaths: 3, Repos: map[string]cynode.GitRepo{
		"app":    app,
		"theirs": {Path: origin, Project: ct.Other},
	}}
	h := ct.Start(t, cfg)
	seed(t, h)
	return h, origin
}

func gitArgs(repo string, params map[string]any) map[string]any {
	a := map[string]any{"task_id": "t1", "provider": "local", "repo": repo}
	if params != nil {
		a["params"] = params
	}
	return a
}

const goodPatch = `diff --git a/README.md b/README.md
--- a/README.md
+++ b/README.md
@@ -1 +1,2 @@
 hello
+world
diff --git a/src/new.txt b/src/new.txt
new file mode 100644
--- /dev/null
+++ b/src/new.txt
@@ -0,0 +1 @@
+new
`

func newFile(path, mode string) string {
	return "diff --git a/" + path + " b/" + path + "\nnew file mode " + mode + "\n--- /dev/null\n+++ b/" + path + "\n@@ -0,0 +1 @@\n+x\n"
}

func TestGitFlow(t *testing.T) {
	h, origin := startGit(t)
	v := h.OK(ct.PMAgent, "git.repo.validate", gitArgs("app", nil))
	if v["default_branch"] != "main" || v["branch_prefix"] != "task/t1/" || len(ct.Str(v, "head_commit")) != 40 {
		t.Fatalf("validate = %v", v)
	}
	br := h.OK(ct.SandboxAgent, "git.branch.create", gitArgs("app", map[string]any{"branch": "task/t1/fix"}))
	if br["from"] != "main" {
		t.Fatalf("branch = %v", br)
	}
	applied := h.OK(ct.SandboxAgent, "git.changeset.apply", gitArgs("app", map[string]any{"branch": "task/t1/fix", "patch": goodPatch}))
	hash := ct.Str(applied, "changeset_hash")
	if len(hash) != 64 || len(applied["paths"].([]any)) != 2 {
		t.Fatalf("apply = %v", applied)
	}
	h.Fail(ct.SandboxAgent, "git.changeset.apply", gitArgs("app", map[string]any{"branch": "task/t1/fix", "patch": goodPatch}), "conflict")
	c := h.OK(ct.SandboxAgent, "git.commit.create", gitArgs("app", map[string]any{"branch": "task/t1/fix", "message": "say world"}))
	if c["changeset_hash"] != hash || c["author"] != ct.SandboxAgent {
		t.Fatalf("commit = %v", c)
	}
	h.Fail(ct.SandboxAgent, "git.commit.create", gitArgs("app", map[string]any{"branch": "task/t1/fix", "message": "again"}), "invalid_argument")
	p := h.OK(ct.SandboxAgent, "git.push", gitArgs("app", map[string]any{"branch": "task/t1/fix"}))
	if got := gitCmd(t, origin, "rev-parse", "refs/heads/task/t1/fix"); got != c["commit"] || p["commit"] != got {
		t.Fatalf("origin has %s, commit %v, push %v", got, c["commit"], p)
	}
	if msg := gitCmd(t, origin, "log", "-1", "--format=%an%n%B", "refs/heads/task/t1/fix"); !strings.Contains(msg, ct.SandboxAgent+"\nsay world") || !strings.Contains(msg, "Cynode-Changeset: sha256:"+hash) {
		t.Fatalf("commit message: %s", msg)
	}
	if gitCmd(t, origin, "show", "main:README.md") != "hello" {
		t.Fatal("main changed")
	}
	pr := h.OK(ct.PMAgent, "git.pr.create", gitArgs("app", map[string]any{"branch": "task/t1/fix", "base": "main", "title": "Say world"}))
	if pr["number"] != float64(1) || pr["url"] != "local://app/pulls/1" || pr["head"] != "task/t1/fix" || pr["state"] != "open" {
		t.Fatalf("pr = %v", pr)
	}
	h.Fail(ct.PMAgent, "git.pr.create", gitArgs("app", map[string]any{"branch": "task/t1/fix", "base": "main", "title": "again"}), "already_exists")
	h.Fail(ct.PMAgent, "git.pr.create", gitArgs("app", map[string]any{"branch": "task/t1/fix", "base": "develop", "title": "x"}), "not_found")

	var hashes []string
	for _, r := range h.Audit(audit.Filter{}) {
		if r.Tool == "git.changeset.apply" || r.Tool == "git.commit.create" {
			if r.Status == audit.StatusSuccess {
				hashes = append(hashes, r.ChangesetHash)
			}
		}
	}
	if len(hashes) != 2 || hashes[0] != hash || hashes[1] != hash {
		t.Fatalf("audit changeset hashes %v, want two of %s", hashes, hash)
	}
}

func TestGitRefuses(t *testing.T) {
	h, origin := startGit(t)
	h.OK(ct.PMAgent, "git.branch.create", gitArgs("app", map[string]any{"branch": "task/t1/work"}))
	apply := func(patch string) map[string]any {
		return gitArgs("app", map[string]any{"branch": "task/t1/work", "patch": patch})
	}
	big := newFile("big.txt", "100644") + strings.Repeat("+"+strings.Repeat("y", 99)+"\n", 50)
	for _, tc := range []struct {
		name, agent, tool string
		args              map[string]any
		typ, says         string
	}{
		{"default deny: PA has no git.*", ct.PAAgent, "git.repo.validate", gitArgs("app", nil), "not_allowed", "allowlist"},
		{"unregistered repository", ct.PMAgent, "git.repo.validate", gitArgs("nope", nil), "not_found", "registered: [app]"},
		{"another project's repository", ct.PMAgent, "git.repo.validate", gitArgs("theirs", nil), "not_found", "not registered for project demo"},
		{"another provider", ct.PMAgent, "git.repo.validate", map[string]any{"task_id": "t1", "provider": "github", "repo": "app"}, "invalid_argument", `"provider":"local"`},
		{"another project's task", ct.PMAgent, "git.repo.validate", map[string]any{"task_id": "t-foreign", "provider": "local", "repo": "app"}, "not_found", "task t-foreign"},
		{"protected branch", ct.PMAgent, "git.branch.create", gitArgs("app", map[string]any{"branch": "main"}), "policy_violation", "protected"},
		{"push to a protected branch", ct.PMAgent, "git.push", gitArgs("app", map[string]any{"branch": "master"}), "policy_violation", "protected"},
		{"outside the task's prefix", ct.PMAgent, "git.branch.create", gitArgs("app", map[string]any{"branch": "feature/x"}), "policy_violation", "task/t1/<name>"},
		{"another task's prefix", ct.PMAgent, "git.push", gitArgs("app", map[string]any{"branch": "task/t2/x"}), "policy_violation", "task/t1/<name>"},
		{"bad ref name", ct.PMAgent, "git.branch.create", gitArgs("app", map[string]any{"branch": "task/t1/a..b"}), "invalid_argument", "valid branch name"},
		{"existing branch", ct.PMAgent, "git.branch.create", gitArgs("app", map[string]any{"branch": "task/t1/work"}), "already_exists", "already exists"},
		{"missing from", ct.PMAgent, "git.branch.create", gitArgs("app", map[string]any{"branch": "task/t1/y", "from": "develop"}), "not_found", "develop"},
		{"patch climbs out", ct.PMAgent, "git.changeset.apply", apply(newFile("../escape.txt", "100644")), "policy_violation", "climbs out"},
		{"patch into .git", ct.PMAgent, "git.changeset.apply", apply(newFile(".git/hooks/post-checkout", "100755")), "policy_violation", "inside .git"},
		{"patch into a nested .GIT", ct.PMAgent, "git.changeset.apply", apply(newFile("sub/.GIT/config", "100644")), "policy_violation", "inside .git"},
		{"symlink", ct.PMAgent, "git.changeset.apply", apply(newFile("link", "120000")), "policy_violation", "symlink"},
		{"submodule", ct.PMAgent, "git.changeset.apply", apply(newFile("mod", "160000")), "policy_violation", "submodule"},
		{"too many paths", ct.PMAgent, "git.changeset.apply", apply(newFile("a", "100644") + newFile("b", "100644") + newFile("c", "100644") + newFile("d", "100644")), "size_limit_exceeded", "git.max_patch_paths"},
		{"too big", ct.PMAgent, "git.changeset.apply", apply(big), "size_limit_exceeded", "git.max_patch_bytes"},
		{"not a diff", ct.PMAgent, "git.changeset.apply", apply("rm -rf /\n"), "invalid_argument", "unified diff"},
		{"does not apply", ct.PMAgent, "git.changeset.apply", apply("diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-goodbye\n+hi\n"), "conflict", "does not apply"},
		{"branch not created", ct.PMAgent, "git.changeset.apply", gitArgs("app", map[string]any{"branch": "task/t1/none", "patch": goodPatch}), "not_found", "git.branch.create"},
		{"pr of an unpushed branch", ct.PMAgent, "git.pr.create", gitArgs("app", map[string]any{"branch": "task/t1/work", "base": "main", "title": "x"}), "not_found", "push it first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := h.Fail(tc.agent, tc.tool, tc.args, tc.typ)
			if !strings.Contains(msg, tc.says) {
				t.Fatalf("message %q does not say %q", msg, tc.says)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(origin), "escape.txt")); err == nil {
		t.Fatal("a changeset wrote outside the clone")
	}
	if out := gitCmd(t, origin, "for-each-ref", "--format=%(refname)"); out != "refs/heads/main" {
		t.Fatalf("the refused calls changed the repository: %s", out)
	}
}
