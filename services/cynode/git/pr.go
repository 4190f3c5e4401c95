package git

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// PRRequest is a pull request to open.
type PRRequest struct {
	Repo, Head, Base, Title, Body string
	// Author is the agent id that asked.
	Author string
	// TaskID is the task the branch belongs to.
	TaskID string
}

// PR is an opened pull request.
type PR struct {
	Number    int       `json:"number"`
	URL       string    `json:"url"`
	Repo      string    `json:"repo"`
	Head      string    `json:"head"`
	Base      string    `json:"base"`
	Title     string    `json:"title"`
	Body      string    `json:"body,omitempty"`
	Author    string    `json:"author"`
	TaskID    string    `json:"task_id"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
}

// ErrPRExists is returned for a second open pull request of one head.
var ErrPRExists = errors.New("a pull request of this branch is already open")

// Provider opens pull requests: Local records them in a file, Forge
// through a GitHub- or Gitea-compatible REST API with a token the service
// holds.
type Provider interface {
	// CreatePR opens a pull request of req.Head into req.Base; when one
	// of req.Head is already open it returns that one and ErrPRExists.
	CreatePR(ctx context.Context, req PRRequest, now time.Time) (PR, error)
	// FindOpenPR returns the open pull request of head in repo, if any.
	FindOpenPR(ctx context.Context, repo, head string) (PR, bool, error)
}

var _ Provider = (*Local)(nil)

// Local is the built-in provider: pull requests are records in a JSON
// file per repository under its directory, numbered from 1.
type Local struct {
	Dir string
	mu  sync.Mutex
}

func (l *Local) read(repo string) ([]PR, error) {
	var prs []PR
	raw, err := os.ReadFile(filepath.Join(l.Dir, repo+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &prs); err != nil {
		return nil, fmt.Errorf("pull requests of %s: %w", repo, err)
	}
	return prs, nil
}

// FindOpenPR implements Provider.
func (l *Local) FindOpenPR(_ context.Context, repo, head string) (PR, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prs, err := l.read(repo)
	if err != nil {
		return PR{}, false, err
	}
	for _, p := range prs {
		if p.Head == head && p.State == "open" {
			return p, true, nil
		}
	}
	return PR{}, false, nil
}

// CreatePR records a pull request.
func (l *Local) CreatePR(_ context.Context, req PRRequest, now time.Time) (PR, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return PR{}, err
	}
	path := filepath.Join(l.Dir, req.Repo+".json")
	prs, err := l.read(req.Repo)
	if err != nil {
		return PR{}, err
	}
	for _, p := range prs {
		if p.Head == req.Head && p.State == "open" {
			return p, ErrPRExists
		}
	}
	pr := PR{Number: len(prs) + 1, Repo: req.Repo, Head: req.Head, Base: req.Base, Title: req.Title, Body: req.Body,
		Author: req.Author, TaskID: req.TaskID, State: "open", CreatedAt: now.UTC()}
	pr.URL = fmt.Sprintf("local://%s/pulls/%d", req.Repo, pr.Number)
	raw, err := json.MarshalIndent(append(prs, pr), "", "  ")
	if err != nil {
		return PR{}, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return PR{}, err
	}
	return pr, os.Rename(tmp, path)
}
