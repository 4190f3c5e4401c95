// Package git is the CyNodeAI git egress tools: git.repo.validate,
// git.branch.create, git.changeset.apply, git.commit.create, git.push and
// git.pr.create, backed by the git binary against repositories the
// operator registers (cynode.json "git.repos"). Default deny: the tools
// are on no default allowlist, and a repository that is not registered,
// or belongs to another project than the calling task's, does not exist
// for the caller. Branches the tools create, change or push are
// <branch_prefix><task_id>/<name>; protected branches are refused;
// changesets are bounded in bytes and paths, may not touch .git, leave
// the tree or create symlinks or submodules, and their sha256
// (changeset_hash) goes into the audit record. Each task works in its
// own clone under <data>/git/work/<repo>/<task_id>, removed when the task
// reaches a terminal status (RemoveClones, called through
// store.WithTaskHook; RemoveTerminalClones at start), after which the
// task's git calls are refused; push updates the registered repository
// (never forced); pr.create goes through a Provider: Local records pull
// requests under <data>/git/prs, Forge opens them through a GitHub- or
// Gitea-compatible REST API with a token the service holds.
package git

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
	"github.com/utpmesh/utpmesh/services/cynode/store"
)

// Tool names.
const (
	ToolValidate = "git.repo.validate"
	ToolApply    = "git.changeset.apply"
	ToolCommit   = "git.commit.create"
	ToolBranch   = "git.branch.create"
	ToolPush     = "git.push"
	ToolPR       = "git.pr.create"
)

func params(props, required string) string {
	req := `"task_id","provider","repo"`
	if required != "" {
		req += `,"params"`
	}
	return `{"type":"object","additionalProperties":false,"required":[` + req + `],"properties":{
	"task_id":` + gateway.IDSchema + `,"provider":{"type":"string","minLength":1,"maxLength":64},"repo":{"type":"string","minLength":1,"maxLength":64},
	"params":{"type":"object","additionalProperties":false,"required":[` + required + `],"properties":{` + props + `}},` + gateway.ContextSchema + `}}`
}

const branchSchema = `{"type":"string","minLength":1,"maxLength":200}`

// Service holds the registered repositories.
type Service struct {
	cfg   gateway.GitConfig
	dir   string
	run   *runner
	prs   map[string]Provider // by repository name
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// New builds the git tools' service; dataDir holds the task clones and
// the local pull requests.
func New(cfg gateway.GitConfig, dataDir string) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir := filepath.Join(dataDir, "git")
	s := &Service{cfg: cfg.WithDefaults(), dir: dir, run: &runner{home: filepath.Join(dir, "home"), timeout: 60 * time.Second},
		prs: map[string]Provider{}, locks: map[string]*sync.Mutex{}}
	local := &Local{Dir: filepath.Join(dir, "prs")}
	for n, r := range s.cfg.Repos {
		switch r.Provider {
		case gateway.ProviderGitHub, gateway.ProviderGitea:
			s.prs[n] = NewForge(r.Provider, *r.Forge, dataDir)
		default:
			s.prs[n] = local
		}
	}
	return s, nil
}

// clonePath is a task's clone of a repository, or "" when the task id
// cannot be one directory name.
func (s *Service) clonePath(repo, taskID string) string {
	if taskID == "" || taskID == "." || taskID == ".." || strings.ContainsAny(taskID, "/\\\x00") {
		return ""
	}
	return filepath.Join(s.dir, "work", repo, taskID)
}

// RemoveClones removes the task's clones of every repository (the task
// reached a terminal status). A call of the task in flight finishes
// first.
func (s *Service) RemoveClones(taskID string) error {
	var errs []error
	for repo := range s.cfg.Repos {
		p := s.clonePath(repo, taskID)
		if p == "" {
			return nil
		}
		unlock := s.lock(p)
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
		unlock()
	}
	return errors.Join(errs...)
}

// RemoveTerminalClones removes, when the service starts, the clones of
// tasks that are already terminal; it returns the task ids removed.
func (s *Service) RemoveTerminalClones(ctx context.Context, st store.Store) ([]string, error) {
	dirs, _ := filepath.Glob(filepath.Join(s.dir, "work", "*", "*"))
	var removed []string
	var errs []error
	for _, d := range dirs {
		id := filepath.Base(d)
		t, err := st.GetTask(ctx, id)
		if err != nil || !store.Terminal(t.Status) {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
			continue
		}
		if !slices.Contains(removed, id) {
			removed = append(removed, id)
		}
	}
	slices.Sort(removed)
	return removed, errors.Join(errs...)
}

// Specs are the git tools; s nil gives the definitions only (for help).
func Specs(s *Service) []gateway.Spec {
	run := func(f func(*Service, context.Context, *gateway.Exec, *call) (any, error)) func(context.Context, *gateway.Exec) (any, error) {
		return func(ctx context.Context, x *gateway.Exec) (any, error) {
			if s == nil {
				return nil, gateway.Errorf(gateway.TypeUnavailable, "the git tools are not configured in this process")
			}
			c, err := s.open(ctx, x)
			if err != nil {
				return nil, err
			}
			return f(s, ctx, x, c)
		}
	}
	return []gateway.Spec{
		{Name: ToolValidate, Description: "Checks that a registered repository belongs to the task's project; returns its default branch, head commit, the task's branch prefix, protected branches and changeset limits.",
			Params: params("", ""), Scope: gateway.ScopeBoth, TaskScoped: true, Run: run((*Service).validate)},
		{Name: ToolBranch, Description: "Creates and checks out <branch_prefix><task_id>/<name> in the task's clone, from params.from (default: the default branch).",
			Params: params(`"branch":`+branchSchema+`,"from":`+branchSchema, `"branch"`), Scope: gateway.ScopeBoth, TaskScoped: true, Run: run((*Service).branch)},
		{Name: ToolApply, Description: "Applies a unified diff (params.patch, as from git diff) to the task's branch and stages it; returns the changed paths and the changeset_hash.",
			Params: params(`"branch":`+branchSchema+`,"patch":{"type":"string","minLength":1}`, `"branch","patch"`), Scope: gateway.ScopeBoth, TaskScoped: true, Run: run((*Service).apply)},
		{Name: ToolCommit, Description: "Commits the staged changeset on the task's branch with params.message; the author is the calling agent.",
			Params: params(`"branch":`+branchSchema+`,"message":{"type":"string","minLength":1,"maxLength":10000}`, `"branch","message"`), Scope: gateway.ScopeBoth, TaskScoped: true, Run: run((*Service).commit)},
		{Name: ToolPush, Description: "Pushes the task's branch to the registered repository (never forced; protected branches refused).",
			Params: params(`"branch":`+branchSchema, `"branch"`), Scope: gateway.ScopeBoth, TaskScoped: true, Run: run((*Service).push)},
		{Name: ToolPR, Description: "Opens a pull request of a pushed task branch into params.base through the repository's provider.",
			Params: params(`"branch":`+branchSchema+`,"base":`+branchSchema+`,"title":{"type":"string","minLength":1,"maxLength":300},"body":{"type":"string","maxLength":60000}`, `"branch","base","title"`),
			Scope:  gateway.ScopeBoth, TaskScoped: true, Run: run((*Service).createPR)},
	}
}

// call is one call's repository and task clone.
type call struct {
	name string
	repo gateway.GitRepo
	work string
	p    struct {
		Branch  string `json:"branch"`
		From    string `json:"from"`
		Patch   string `json:"patch"`
		Message string `json:"message"`
		Base    string `json:"base"`
		Title   string `json:"title"`
		Body    string `json:"body"`
	}
}

func (s *Service) open(ctx context.Context, x *gateway.Exec) (*call, error) {
	var a struct {
		Provider string `json:"provider"`
		Repo     string `json:"repo"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	r, ok := s.cfg.Repos[a.Repo]
	if !ok || r.Project != x.Project {
		var mine []string
		for n, rr := range s.cfg.Repos {
			if rr.Project == x.Project {
				mine = append(mine, n)
			}
		}
		slices.Sort(mine)
		return nil, gateway.Errorf(gateway.TypeNotFound, "repository %q is not registered for project %s (registered: %v); the operator registers repositories under git.repos in cynode.json", a.Repo, x.Project, mine)
	}
	if a.Provider != r.Provider {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "repository %s uses provider %q, not %q; pass \"provider\":%q", a.Repo, r.Provider, a.Provider, r.Provider)
	}
	if t, err := x.Store.GetTask(ctx, x.TaskID); err == nil && store.Terminal(t.Status) {
		return nil, gateway.Errorf(gateway.TypeConflict, "task %s is %s, and its clones are removed; the git tools work for pending and running tasks", x.TaskID, t.Status)
	}
	work := s.clonePath(a.Repo, x.TaskID)
	if work == "" {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "task id %q cannot name a clone directory; the git tools need task ids without '/', '\\' or NUL", x.TaskID)
	}
	c := &call{name: a.Repo, repo: r, work: work}
	var wrap struct {
		Params *struct {
			Branch  string `json:"branch"`
			From    string `json:"from"`
			Patch   string `json:"patch"`
			Message string `json:"message"`
			Base    string `json:"base"`
			Title   string `json:"title"`
			Body    string `json:"body"`
		} `json:"params"`
	}
	if err := x.Bind(&wrap); err != nil {
		return nil, err
	}
	if wrap.Params != nil {
		c.p = *wrap.Params
	}
	return c, nil
}

// lock serializes the calls of one task clone.
func (s *Service) lock(path string) func() {
	s.mu.Lock()
	l, ok := s.locks[path]
	if !ok {
		l = &sync.Mutex{}
		s.locks[path] = l
	}
	s.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// gitErr reports a failed git command (or a missing binary).
func (s *Service) gitErr(err error) error {
	return gateway.Errorf(gateway.TypeUnavailable, "%v", err)
}

func (s *Service) prefix(c *call, taskID string) string { return c.repo.BranchPrefix + taskID + "/" }

func protected(patterns []string, branch string) bool {
	for _, p := range patterns {
		if p == branch {
			return true
		}
		if pre, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(branch, pre) {
			return true
		}
	}
	return false
}

// checkBranch: a valid ref name, under the task's prefix, not protected.
func (s *Service) checkBranch(ctx context.Context, c *call, x *gateway.Exec, branch string) error {
	if protected(c.repo.ProtectedBranches, branch) {
		return gateway.Errorf(gateway.TypePolicyViolation, "branch %s is protected (git.repos.%s.protected_branches %v); work on a branch named %s<name>", branch, c.name, c.repo.ProtectedBranches, s.prefix(c, x.TaskID)).
			With(map[string]any{"limit": "protected_branches"})
	}
	pre := s.prefix(c, x.TaskID)
	if !strings.HasPrefix(branch, pre) || len(branch) == len(pre) {
		return gateway.Errorf(gateway.TypePolicyViolation, "branch %q is not one of this task's branches; name it %s<name>", branch, pre).
			With(map[string]any{"limit": "branch_prefix", "branch_prefix": pre})
	}
	if _, err := s.run.run(ctx, "", nil, nil, "check-ref-format", "--branch", branch); err != nil {
		if errors.Is(err, ErrNoGit) {
			return s.gitErr(err)
		}
		return gateway.Errorf(gateway.TypeInvalidArgument, "%q is not a valid branch name (git check-ref-format); use letters, digits, '-', '_', '/' and '.' without '..'", branch)
	}
	return nil
}

// ensureClone clones the registered repository for the task once.
func (s *Service) ensureClone(ctx context.Context, c *call) error {
	if _, err := os.Stat(filepath.Join(c.work, ".git")); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(c.work), 0o700); err != nil {
		return gateway.Errorf(gateway.TypeInternal, "task clone: %v", err)
	}
	if err := os.MkdirAll(s.run.home, 0o700); err != nil {
		return gateway.Errorf(gateway.TypeInternal, "git home: %v", err)
	}
	_ = os.RemoveAll(c.work) // a clone left half-done by a crash
	if _, err := s.run.run(ctx, "", nil, nil, "clone", "--quiet", "--no-hardlinks", "--", c.repo.Path, c.work); err != nil {
		return s.gitErr(err)
	}
	return nil
}

func (s *Service) current(ctx context.Context, c *call) (string, error) {
	out, err := s.run.run(ctx, c.work, nil, nil, "symbolic-ref", "--quiet", "--short", "HEAD")
	return strings.TrimSpace(out), err
}

func (s *Service) validate(ctx context.Context, x *gateway.Exec, c *call) (any, error) {
	def, err := s.run.run(ctx, c.repo.Path, nil, nil, "symbolic-ref", "--short", "HEAD")
	if err != nil {
		return nil, s.gitErr(err)
	}
	head, err := s.run.run(ctx, c.repo.Path, nil, nil, "rev-parse", "--verify", "--quiet", "HEAD")
	if err != nil {
		head = ""
	}
	return map[string]any{"repo": c.name, "provider": c.repo.Provider, "project": c.repo.Project, "default_branch": strings.TrimSpace(def),
		"head_commit": strings.TrimSpace(head), "branch_prefix": s.prefix(c, x.TaskID), "protected_branches": c.repo.ProtectedBranches,
		"max_patch_bytes": s.cfg.MaxPatchBytes, "max_patch_paths": s.cfg.MaxPatchPaths, "valid": true}, nil
}

func (s *Service) branch(ctx context.Context, x *gateway.Exec, c *call) (any, error) {
	if err := s.checkBranch(ctx, c, x, c.p.Branch); err != nil {
		return nil, err
	}
	defer s.lock(c.work)()
	if err := s.ensureClone(ctx, c); err != nil {
		return nil, err
	}
	from := c.p.From
	if from == "" {
		def, err := s.run.run(ctx, c.repo.Path, nil, nil, "symbolic-ref", "--short", "HEAD")
		if err != nil {
			return nil, s.gitErr(err)
		}
		from = strings.TrimSpace(def)
	}
	if _, err := s.run.run(ctx, c.work, nil, nil, "fetch", "--quiet", "origin"); err != nil {
		return nil, s.gitErr(err)
	}
	start, err := s.run.run(ctx, c.work, nil, nil, "rev-parse", "--verify", "--quiet", "refs/remotes/origin/"+from+"^{commit}")
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeNotFound, "branch %q does not exist in repository %s; pass an existing branch as from", from, c.name)
	}
	if _, err := s.run.run(ctx, c.work, nil, nil, "rev-parse", "--verify", "--quiet", "refs/heads/"+c.p.Branch); err == nil {
		return nil, gateway.Errorf(gateway.TypeAlreadyExists, "branch %s already exists in the task's clone; apply changesets to it or create another", c.p.Branch)
	}
	if _, err := s.run.run(ctx, c.work, nil, nil, "checkout", "--quiet", "-b", c.p.Branch, strings.TrimSpace(start)); err != nil {
		return nil, gateway.Errorf(gateway.TypeConflict, "cannot switch the task's clone to a new branch: %v", err)
	}
	return map[string]any{"repo": c.name, "branch": c.p.Branch, "from": from, "commit": strings.TrimSpace(start)}, nil
}

// onBranch makes branch the clone's current branch: it must exist, and a
// clone with staged changes of another branch is not switched.
func (s *Service) onBranch(ctx context.Context, c *call, branch string) error {
	if _, err := os.Stat(filepath.Join(c.work, ".git")); err != nil {
		return gateway.Errorf(gateway.TypeNotFound, "the task has no branch %s yet; create it with git.branch.create", branch)
	}
	cur, err := s.current(ctx, c)
	if err == nil && cur == branch {
		return nil
	}
	if _, err := s.run.run(ctx, c.work, nil, nil, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch); err != nil {
		return gateway.Errorf(gateway.TypeNotFound, "the task has no branch %s; create it with git.branch.create", branch)
	}
	if st, _ := s.run.run(ctx, c.work, nil, nil, "status", "--porcelain"); strings.TrimSpace(st) != "" {
		return gateway.Errorf(gateway.TypeConflict, "the task's clone has uncommitted changes on %s; commit them (git.commit.create) before working on %s", cur, branch)
	}
	if _, err := s.run.run(ctx, c.work, nil, nil, "checkout", "--quiet", branch); err != nil {
		return gateway.Errorf(gateway.TypeConflict, "cannot switch to %s: %v", branch, err)
	}
	return nil
}

// stagedHash is the changeset_hash: sha256 of the staged diff.
func (s *Service) stagedHash(ctx context.Context, c *call) (string, string, error) {
	d, err := s.run.run(ctx, c.work, nil, nil, "diff", "--cached", "--binary", "--full-index")
	if err != nil {
		return "", "", s.gitErr(err)
	}
	sum := sha256.Sum256([]byte(d))
	return hex.EncodeToString(sum[:]), d, nil
}

func (s *Service) apply(ctx context.Context, x *gateway.Exec, c *call) (any, error) {
	if err := s.checkBranch(ctx, c, x, c.p.Branch); err != nil {
		return nil, err
	}
	patch := c.p.Patch
	if !strings.HasSuffix(patch, "\n") {
		patch += "\n"
	}
	if len(patch) > s.cfg.MaxPatchBytes {
		return nil, gateway.Errorf(gateway.TypeSizeLimit, "the changeset is %d bytes, over git.max_patch_bytes (%d); split it into several changesets", len(patch), s.cfg.MaxPatchBytes).
			With(map[string]any{"limit": "git.max_patch_bytes", "limit_bytes": s.cfg.MaxPatchBytes})
	}
	if err := checkPatchHeaders(patch); err != nil {
		return nil, err
	}
	defer s.lock(c.work)()
	if err := s.onBranch(ctx, c, c.p.Branch); err != nil {
		return nil, err
	}
	stat, err := s.run.run(ctx, c.work, []byte(patch), nil, "apply", "--numstat", "-z", "-")
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "params.patch is not a unified diff git can read (%v); pass the output of git diff", err)
	}
	paths := numstatPaths(stat)
	if len(paths) == 0 {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "params.patch changes no file; pass the output of git diff")
	}
	if len(paths) > s.cfg.MaxPatchPaths {
		return nil, gateway.Errorf(gateway.TypeSizeLimit, "the changeset touches %d paths, over git.max_patch_paths (%d); split it", len(paths), s.cfg.MaxPatchPaths).
			With(map[string]any{"limit": "git.max_patch_paths", "limit_paths": s.cfg.MaxPatchPaths})
	}
	for _, p := range paths {
		if err := checkPath(p); err != nil {
			return nil, err
		}
	}
	if _, err := s.run.run(ctx, c.work, []byte(patch), nil, "apply", "--index", "--whitespace=nowarn", "-"); err != nil {
		return nil, gateway.Errorf(gateway.TypeConflict, "the changeset does not apply to %s: %v", c.p.Branch, err)
	}
	hash, _, err := s.stagedHash(ctx, c)
	if err != nil {
		return nil, err
	}
	x.ChangesetHash = hash
	return map[string]any{"repo": c.name, "branch": c.p.Branch, "paths": paths, "changeset_hash": hash, "staged": true}, nil
}

// checkPatchHeaders refuses symlinks and submodules (modes 120000,
// 160000) and binary patches.
func checkPatchHeaders(patch string) error {
	for _, line := range strings.Split(patch, "\n") {
		if strings.HasPrefix(line, "new file mode ") || strings.HasPrefix(line, "new mode ") || strings.HasPrefix(line, "deleted file mode ") || strings.HasPrefix(line, "old mode ") {
			mode := line[strings.LastIndexByte(line, ' ')+1:]
			if mode == "120000" || mode == "160000" {
				return gateway.Errorf(gateway.TypePolicyViolation, "the changeset creates or changes a symlink or submodule (%q); changesets may hold regular files only", line).
					With(map[string]any{"limit": "regular files only"})
			}
		}
		if strings.HasPrefix(line, "GIT binary patch") {
			return gateway.Errorf(gateway.TypePolicyViolation, "the changeset holds a binary patch; changesets are text diffs (put binary files into artifacts)")
		}
	}
	return nil
}

// numstatPaths reads `git apply --numstat -z`: "add\tdel\tpath\0", or for
// a rename "add\tdel\t\0from\0to\0".
func numstatPaths(out string) []string {
	var paths []string
	tok := strings.Split(out, "\x00")
	for i := 0; i < len(tok); i++ {
		t := tok[i]
		if t == "" {
			continue
		}
		parts := strings.SplitN(t, "\t", 3)
		if len(parts) < 3 {
			continue
		}
		if parts[2] != "" {
			paths = append(paths, parts[2])
			continue
		}
		if i+2 < len(tok) {
			paths = append(paths, tok[i+1], tok[i+2])
			i += 2
		}
	}
	return paths
}

// checkPath refuses paths that leave the tree or touch git's own files.
func checkPath(p string) error {
	bad := func(why string) error {
		return gateway.Errorf(gateway.TypePolicyViolation, "the changeset touches %q, which %s; changesets may change files inside the repository only", p, why).
			With(map[string]any{"limit": "patch paths", "path": p})
	}
	if strings.HasPrefix(p, "/") || filepath.IsAbs(p) {
		return bad("is absolute")
	}
	for _, seg := range strings.Split(p, "/") {
		switch {
		case seg == "..":
			return bad("climbs out with \"..\"")
		case strings.EqualFold(seg, ".git") || strings.EqualFold(strings.TrimRight(seg, ". "), ".git"):
			return bad("is inside .git")
		}
	}
	if strings.ContainsAny(p, "\x00\\") {
		return bad("holds a NUL or backslash")
	}
	return nil
}

func (s *Service) commit(ctx context.Context, x *gateway.Exec, c *call) (any, error) {
	if err := s.checkBranch(ctx, c, x, c.p.Branch); err != nil {
		return nil, err
	}
	defer s.lock(c.work)()
	if err := s.onBranch(ctx, c, c.p.Branch); err != nil {
		return nil, err
	}
	hash, diff, err := s.stagedHash(ctx, c)
	if err != nil {
		return nil, err
	}
	if diff == "" {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "nothing is staged on %s; apply a changeset first (git.changeset.apply)", c.p.Branch)
	}
	who := x.Identity.AgentID
	env := []string{"GIT_AUTHOR_NAME=" + who, "GIT_AUTHOR_EMAIL=" + who + "@cynode.invalid", "GIT_COMMITTER_NAME=" + who, "GIT_COMMITTER_EMAIL=" + who + "@cynode.invalid"}
	msg := strings.TrimRight(c.p.Message, "\n") + "\n\nCynode-Task: " + x.TaskID + "\nCynode-Changeset: sha256:" + hash + "\n"
	if _, err := s.run.run(ctx, c.work, []byte(msg), env, "commit", "--quiet", "--no-verify", "--cleanup=verbatim", "-F", "-"); err != nil {
		return nil, s.gitErr(err)
	}
	sha, err := s.run.run(ctx, c.work, nil, nil, "rev-parse", "HEAD")
	if err != nil {
		return nil, s.gitErr(err)
	}
	x.ChangesetHash = hash
	return map[string]any{"repo": c.name, "branch": c.p.Branch, "commit": strings.TrimSpace(sha), "changeset_hash": hash, "author": who}, nil
}

func (s *Service) push(ctx context.Context, x *gateway.Exec, c *call) (any, error) {
	if err := s.checkBranch(ctx, c, x, c.p.Branch); err != nil {
		return nil, err
	}
	defer s.lock(c.work)()
	if _, err := os.Stat(filepath.Join(c.work, ".git")); err != nil {
		return nil, gateway.Errorf(gateway.TypeNotFound, "the task has no branch %s yet; create it with git.branch.create", c.p.Branch)
	}
	sha, err := s.run.run(ctx, c.work, nil, nil, "rev-parse", "--verify", "--quiet", "refs/heads/"+c.p.Branch)
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeNotFound, "the task has no branch %s; create it with git.branch.create", c.p.Branch)
	}
	ref := "refs/heads/" + c.p.Branch
	if _, err := s.run.run(ctx, c.work, nil, nil, "push", "--quiet", "--no-verify", "origin", ref+":"+ref); err != nil {
		return nil, gateway.Errorf(gateway.TypeConflict, "push of %s was refused (pushes are never forced): %v", c.p.Branch, err)
	}
	return map[string]any{"repo": c.name, "branch": c.p.Branch, "commit": strings.TrimSpace(sha), "pushed": true}, nil
}

func (s *Service) createPR(ctx context.Context, x *gateway.Exec, c *call) (any, error) {
	if err := s.checkBranch(ctx, c, x, c.p.Branch); err != nil {
		return nil, err
	}
	for _, b := range []string{c.p.Branch, c.p.Base} {
		if _, err := s.run.run(ctx, c.repo.Path, nil, nil, "rev-parse", "--verify", "--quiet", "refs/heads/"+b); err != nil {
			return nil, gateway.Errorf(gateway.TypeNotFound, "branch %q is not in repository %s; push it first (git.push) or name an existing base", b, c.name)
		}
	}
	if c.p.Base == c.p.Branch {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "base and branch are both %s; pass the branch to merge into as base", c.p.Base)
	}
	pr, err := s.prs[c.name].CreatePR(ctx, PRRequest{Repo: c.name, Head: c.p.Branch, Base: c.p.Base, Title: c.p.Title, Body: c.p.Body, Author: x.Identity.AgentID, TaskID: x.TaskID}, x.Now)
	if errors.Is(err, ErrPRExists) {
		return nil, gateway.Errorf(gateway.TypeAlreadyExists, "pull request %d of %s is already open (%s)", pr.Number, c.p.Branch, pr.URL)
	}
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeUnavailable, "the %s provider: %v", c.repo.Provider, err)
	}
	return pr, nil
}
