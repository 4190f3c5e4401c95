package gateway

import (
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
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
	// Provider is the pull-request provider: "local" (the default:
	// records under <data>/git/prs), "github" or "gitea" (the forge's REST
	// API; Forge says where).
	Provider string `json:"provider,omitempty"`
	// Forge is the repository on a github or gitea provider.
	Forge *GitForge `json:"forge,omitempty"`
	// ProtectedBranches are never created, changed or pushed ("name" or
	// "prefix/*"); default main and master.
	ProtectedBranches []string `json:"protected_branches,omitempty"`
	// BranchPrefix starts every branch the tools create: branches are
	// <branch_prefix><task_id>/<name>. Default "task/".
	BranchPrefix string `json:"branch_prefix,omitempty"`
}

// GitForge is where a forge provider opens pull requests.
type GitForge struct {
	// APIURL is the forge's API root: https://api.github.com for GitHub,
	// https://<host>/api/v1 for Gitea (or a compatible forge). The
	// operator's endpoint: it may be on the local network.
	APIURL string `json:"api_url"`
	// Owner and Repo name the repository on the forge.
	Owner string `json:"owner"`
	Repo  string `json:"repo"`
	// Credential holds the token: env or file (relative to the data
	// directory, or absolute). Header and prefix default to
	// "Authorization" and "Bearer " (github) or "token " (gitea).
	Credential APICredential `json:"credential"`
	// TimeoutMS bounds one API request (default 15000).
	TimeoutMS int `json:"timeout_ms,omitempty"`
}

// Pull-request providers.
const (
	ProviderLocal  = "local"
	ProviderGitHub = "github"
	ProviderGitea  = "gitea"
)

var forgeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

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
		switch r.Provider {
		case "", ProviderLocal:
			if r.Forge != nil {
				return fmt.Errorf("%s.forge is set but provider is local; set provider to github or gitea, or remove forge", at)
			}
		case ProviderGitHub, ProviderGitea:
			if err := r.Forge.validate(at + ".forge"); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s.provider %q: use local, github or gitea", at, r.Provider)
		}
		if p := r.BranchPrefix; p != "" && (!strings.HasSuffix(p, "/") || strings.Contains(p, "..") || strings.HasPrefix(p, "/")) {
			return fmt.Errorf("%s.branch_prefix %q: use a prefix ending in '/', such as \"task/\"", at, p)
		}
	}
	return nil
}

func (f *GitForge) validate(at string) error {
	if f == nil {
		return fmt.Errorf("%s is missing: a github or gitea provider needs api_url, owner, repo and credential", at)
	}
	u, err := url.Parse(f.APIURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" {
		return fmt.Errorf("%s.api_url %q: use the API root URL, such as https://api.github.com or https://gitea.example.org/api/v1", at, f.APIURL)
	}
	if !forgeName.MatchString(f.Owner) || !forgeName.MatchString(f.Repo) || f.Repo == ".." || f.Owner == ".." {
		return fmt.Errorf("%s: owner %q and repo %q must be the forge's names (letters, digits, '.', '_', '-')", at, f.Owner, f.Repo)
	}
	if c := f.Credential; (c.Env == "") == (c.File == "") {
		return fmt.Errorf("%s.credential: set exactly one of env or file (the token the service sends; never shown to agents)", at)
	}
	if f.TimeoutMS < 0 {
		return fmt.Errorf("%s.timeout_ms must be positive", at)
	}
	return nil
}
