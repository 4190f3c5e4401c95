package git

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
)

// ErrNoToken is returned when a forge's token cannot be read.
var ErrNoToken = errors.New("the forge token is not available")

// maxForgeBody bounds a forge's answer.
const maxForgeBody = 1 << 20

// Forge is a Provider that opens pull requests through a GitHub
// (api.github.com) or Gitea (<host>/api/v1) compatible REST API:
// POST /repos/{owner}/{repo}/pulls to open, GET
// /repos/{owner}/{repo}/pulls?state=open to find an open one by head
// branch. The token is read at each request from the operator's
// environment variable or file and sent only in the credential header;
// it is never in a result or an error (a forge's message that repeats it
// shows [redacted]). No proxy from the environment is used and redirects
// are not followed.
type Forge struct {
	// Kind is gateway.ProviderGitHub or gateway.ProviderGitea.
	Kind string
	cfg  gateway.GitForge
	// dataDir resolves a relative credential file.
	dataDir string
	client  *http.Client
}

var _ Provider = (*Forge)(nil)

// NewForge builds the provider of one repository's forge.
func NewForge(kind string, cfg gateway.GitForge, dataDir string) *Forge {
	timeout := time.Duration(cfg.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	if cfg.Credential.Header == "" {
		cfg.Credential.Header = "Authorization"
		cfg.Credential.Prefix = "Bearer "
		if kind == gateway.ProviderGitea {
			cfg.Credential.Prefix = "token "
		}
	}
	return &Forge{Kind: kind, cfg: cfg, dataDir: dataDir, client: &http.Client{
		Timeout:       timeout,
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true, ResponseHeaderTimeout: timeout},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (f *Forge) token() (string, error) {
	c := f.cfg.Credential
	if c.Env != "" {
		if v := os.Getenv(c.Env); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: environment variable %s is unset on the service's host (the operator sets it)", ErrNoToken, c.Env)
	}
	p := c.File
	if !filepath.IsAbs(p) {
		p = filepath.Join(f.dataDir, p)
	}
	raw, err := os.ReadFile(p)
	if err != nil || strings.TrimSpace(string(raw)) == "" {
		return "", fmt.Errorf("%w: its file (forge.credential.file) cannot be read or is empty", ErrNoToken)
	}
	return strings.TrimSpace(string(raw)), nil
}

func (f *Forge) pullsURL() string {
	return strings.TrimRight(f.cfg.APIURL, "/") + "/repos/" + url.PathEscape(f.cfg.Owner) + "/" + url.PathEscape(f.cfg.Repo) + "/pulls"
}

// forgePR is the part of a GitHub or Gitea pull request the service
// reads.
type forgePR struct {
	Number    int       `json:"number"`
	HTMLURL   string    `json:"html_url"`
	State     string    `json:"state"`
	Title     string    `json:"title"`
	Body      string    `json:"body"`
	CreatedAt time.Time `json:"created_at"`
	Head      struct {
		Ref string `json:"ref"`
	} `json:"head"`
	Base struct {
		Ref string `json:"ref"`
	} `json:"base"`
}

func (p forgePR) pr(repo string) PR {
	return PR{Number: p.Number, URL: p.HTMLURL, Repo: repo, Head: p.Head.Ref, Base: p.Base.Ref, Title: p.Title, Body: p.Body,
		State: p.State, CreatedAt: p.CreatedAt.UTC()}
}

// do sends one request and decodes a 2xx JSON answer into out.
func (f *Forge) do(ctx context.Context, method, u string, body, out any) error {
	tok, err := f.token()
	if err != nil {
		return err
	}
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	req.Header.Set(f.cfg.Credential.Header, f.cfg.Credential.Prefix+tok)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "utpmesh-cynode")
	if f.Kind == gateway.ProviderGitHub {
		req.Header.Set("Accept", "application/vnd.github+json")
		req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return errors.New(redact(fmt.Sprintf("%s %s: %v", method, f.cfg.APIURL, unwrapURL(err)), tok))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxForgeBody+1))
	if err != nil {
		return fmt.Errorf("reading the forge's answer: %w", err)
	}
	if len(raw) > maxForgeBody {
		return fmt.Errorf("the forge's answer is over %d bytes", maxForgeBody)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(raw, &e)
		if len(e.Message) > 300 {
			e.Message = e.Message[:300] + "…"
		}
		return errors.New(redact(fmt.Sprintf("the forge answered %s to %s /repos/%s/%s/pulls: %s", strconv.Itoa(resp.StatusCode), method, f.cfg.Owner, f.cfg.Repo, e.Message), tok))
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("the forge's answer is not the expected JSON: %w", err)
	}
	return nil
}

// unwrapURL drops *url.Error's method and URL (the caller says them).
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// redact removes the token from a message.
func redact(s, tok string) string {
	if tok == "" {
		return s
	}
	return strings.ReplaceAll(s, tok, "[redacted]")
}

// FindOpenPR implements Provider: the open pull requests, page by page
// (at most 10 pages of 50), filtered by head branch.
func (f *Forge) FindOpenPR(ctx context.Context, repo, head string) (PR, bool, error) {
	for page := 1; page <= 10; page++ {
		q := url.Values{"state": {"open"}, "page": {strconv.Itoa(page)}}
		if f.Kind == gateway.ProviderGitHub {
			q.Set("per_page", "50")
			q.Set("head", f.cfg.Owner+":"+head)
		} else {
			q.Set("limit", "50")
		}
		var prs []forgePR
		if err := f.do(ctx, http.MethodGet, f.pullsURL()+"?"+q.Encode(), nil, &prs); err != nil {
			return PR{}, false, err
		}
		for _, p := range prs {
			if p.Head.Ref == head && p.State == "open" {
				return p.pr(repo), true, nil
			}
		}
		if len(prs) < 50 {
			break
		}
	}
	return PR{}, false, nil
}

// CreatePR implements Provider.
func (f *Forge) CreatePR(ctx context.Context, req PRRequest, _ time.Time) (PR, error) {
	if p, ok, err := f.FindOpenPR(ctx, req.Repo, req.Head); err != nil {
		return PR{}, err
	} else if ok {
		return p, ErrPRExists
	}
	body := map[string]string{"title": req.Title, "head": req.Head, "base": req.Base, "body": req.Body}
	var p forgePR
	if err := f.do(ctx, http.MethodPost, f.pullsURL(), body, &p); err != nil {
		return PR{}, err
	}
	if p.Number <= 0 {
		return PR{}, errors.New("the forge's answer has no pull request number")
	}
	out := p.pr(req.Repo)
	out.Author, out.TaskID = req.Author, req.TaskID
	if out.Head == "" {
		out.Head, out.Base = req.Head, req.Base
	}
	return out, nil
}
