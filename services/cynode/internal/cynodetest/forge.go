package cynodetest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ForgeRequest is one request a FakeForge received.
type ForgeRequest struct {
	Method, Path string
	Query        map[string][]string
	// Auth is the Authorization header as sent.
	Auth string
	Body map[string]any
}

// FakeForge is a GitHub ("github") or Gitea ("gitea") pull-request API
// on a local httptest server: POST and GET /repos/{owner}/{repo}/pulls,
// token-checked, pull requests kept in memory.
type FakeForge struct {
	// APIURL is the API root to configure (Gitea's ends in /api/v1).
	APIURL       string
	Kind, Token  string
	Owner, Repo  string
	mu           sync.Mutex
	rejectCreate bool
	requests     []ForgeRequest
	prs          []map[string]any
}

// StartForge starts a fake forge of kind for owner/repo that accepts
// token; it stops when the test ends.
func StartForge(t testing.TB, kind, token, owner, repo string) *FakeForge {
	t.Helper()
	f := &FakeForge{Kind: kind, Token: token, Owner: owner, Repo: repo}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	f.APIURL = srv.URL
	if kind == "gitea" {
		f.APIURL += "/api/v1"
	}
	return f
}

// RejectCreate makes POST answer 422 with a message repeating the
// request's Authorization header (a careless forge).
func (f *FakeForge) RejectCreate(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rejectCreate = on
}

// Requests are the requests received so far.
func (f *FakeForge) Requests() []ForgeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]ForgeRequest{}, f.requests...)
}

func (f *FakeForge) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	req := ForgeRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Auth: r.Header.Get("Authorization")}
	_ = json.Unmarshal(raw, &req.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	scheme := "Bearer "
	prefix := ""
	if f.Kind == "gitea" {
		scheme, prefix = "token ", "/api/v1"
	}
	if req.Auth != scheme+f.Token {
		reply(http.StatusUnauthorized, map[string]any{"message": "Bad credentials"})
		return
	}
	if r.URL.Path != prefix+"/repos/"+f.Owner+"/"+f.Repo+"/pulls" {
		reply(http.StatusNotFound, map[string]any{"message": "Not Found"})
		return
	}
	switch r.Method {
	case http.MethodGet:
		var out []map[string]any
		for _, p := range f.prs {
			head := p["head"].(map[string]any)["ref"].(string)
			if h := r.URL.Query().Get("head"); f.Kind == "github" && h != "" && h != f.Owner+":"+head {
				continue
			}
			out = append(out, p)
		}
		if out == nil {
			out = []map[string]any{}
		}
		reply(http.StatusOK, out)
	case http.MethodPost:
		if f.rejectCreate {
			reply(http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed for request with " + req.Auth})
			return
		}
		for _, k := range []string{"title", "head", "base"} {
			if s, _ := req.Body[k].(string); s == "" {
				reply(http.StatusUnprocessableEntity, map[string]any{"message": "missing " + k})
				return
			}
		}
		n := len(f.prs) + 1
		p := map[string]any{"number": n, "state": "open", "title": req.Body["title"], "body": req.Body["body"],
			"html_url":   fmt.Sprintf("https://forge.example/%s/%s/pull/%d", f.Owner, f.Repo, n),
			"created_at": time.Date(2026, 11, 23, 7, 0, n, 0, time.UTC).Format(time.RFC3339),
			"head":       map[string]any{"ref": req.Body["head"], "label": f.Owner + ":" + req.Body["head"].(string)},
			"base":       map[string]any{"ref": req.Body["base"]}}
		f.prs = append(f.prs, p)
		reply(http.StatusCreated, p)
	default:
		reply(http.StatusMethodNotAllowed, map[string]any{"message": "method " + strconv.Quote(r.Method)})
	}
}

// Contains reports whether any recorded request holds s in its query or
// body (for tests that a secret never travels where it should not).
func (f *FakeForge) Contains(s string) bool {
	for _, r := range f.Requests() {
		raw, _ := json.Marshal(r.Body)
		q, _ := json.Marshal(r.Query)
		if strings.Contains(string(raw), s) || strings.Contains(string(q), s) {
			return true
		}
	}
	return false
}
