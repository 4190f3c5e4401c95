package gateway

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// GitConfig registers the repositories git.* may touch (cynode.json
// "git"). The git tools are on no default allowlist: an operator adds
// "git.*" to an agent type's allowlist and registers repositories here.
type GitConfig struct {
	Repos map[string]GitRepo `json:"repos,omitempty"`
	// MaxPatchBytes bounds a changeset (default 256 KiB).
	MaxPatchBytes int `json:"max_patch_bytes,omitempty"`
	// MaxPatchPaths bounds the files a changeset touches (default 100).
	MaxPatchPaths int `json:"max_patch_paths,omitempty"`
}

// GitRepo is one registered repository.
type GitRepo struct {
	// Path is the repository the service clones from and pushes to (a
	// bare repository or a checkout), absolute.
	Path string `json:"path"`
	// Project owns the repository; other projects' tasks cannot see it.
	Project string `json:"project"`
	// Provider is the pull-request provider (default and only built-in:
	// "local").
	Provider string `json:"provider,omitempty"`
	// ProtectedBranches are never created, changed or pushed ("name" or
	// "prefix/*"); default main and master.
	ProtectedBranches []string `json:"protected_branches,omitempty"`
	// BranchPrefix starts every branch the tools create: branches are
	// <branch_prefix><task_id>/<name>. Default "task/".
	BranchPrefix string `json:"branch_prefix,omitempty"`
}

// DefaultGit are the git limits when the configuration sets none.
var DefaultGit = GitConfig{MaxPatchBytes: 256 << 10, MaxPatchPaths: 100}

// WithDefaults fills zero fields.
func (g GitConfig) WithDefaults() GitConfig {
	if g.MaxPatchBytes <= 0 {
		g.MaxPatchBytes = DefaultGit.MaxPatchBytes
	}
	if g.MaxPatchPaths <= 0 {
		g.MaxPatchPaths = DefaultGit.MaxPatchPaths
	}
	repos := map[string]GitRepo{}
	for n, r := range g.Repos {
		if r.Provider == "" {
			r.Provider = "local"
		}
		if len(r.ProtectedBranches) == 0 {
			r.ProtectedBranches = []string{"main", "master"}
		}
		if r.BranchPrefix == "" {
			r.BranchPrefix = "task/"
		}
		repos[n] = r
	}
	g.Repos = repos
	return g
}

// Validate checks the git configuration and says what to fix.
func (g GitConfig) Validate() error {
	names := make([]string, 0, len(g.Repos))
	for n := range g.Repos {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r := g.Repos[n]
		at := "cynode config: git.repos." + n
		if !apiName.MatchString(n) {
			return fmt.Errorf("%s: the name must be lower-case letters, digits, '_', '.', '-'", at)
		}
		if !filepath.IsAbs(r.Path) {
			return fmt.Errorf("%s.path %q: use the absolute path of the repository", at, r.Path)
		}
		if r.Project == "" {
			return fmt.Errorf("%s.project is missing; name the project that owns the repository", at)
		}
		if r.Provider != "" && r.Provider != "local" {
			return fmt.Errorf("%s.provider %q: the only provider built in is \"local\"", at, r.Provider)
		}
		if p := r.BranchPrefix; p != "" && (!strings.HasSuffix(p, "/") || strings.Contains(p, "..") || strings.HasPrefix(p, "/")) {
			return fmt.Errorf("%s.branch_prefix %q: use a prefix ending in '/', such as \"task/\"", at, p)
		}
	}
	return nil
}
