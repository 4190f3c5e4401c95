package webui_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/apps/webui"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/confirm/confirmtest"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

const testToken = "test-token-0123456789abcdef"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fixture is a real mesh (echo, fail and the hold catalogue; no gate), a UI over it on httptest, and an agent that makes calls.
type fixture struct {
	m     *mesh.Mesh
	turns cardstore.Store
	ui    *webui.Server
	srv   *httptest.Server
	agent *agent.Client
}

type option func(*webui.Config)

func readOnly(c *webui.Config) { c.Agent = nil }
func openUI(c *webui.Config)   { c.Open, c.Token = true, "" }

func newFixture(t *testing.T, opts ...option) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dir := t.TempDir()
	h := confirmtest.New()
	tools := append(h.Tools(), worker.Tool{Name: "echo", Description: "returns its arguments",
		Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) { return worker.OK(c.Arguments), nil }},
		worker.Tool{Name: "fail", Description: "always fails",
			Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
				return worker.Result{}, worker.Fail(card.CodeBadRequest, "fail always fails")
			}})
	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Tools: tools, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	h.Record(m.Cards())
	f := &fixture{m: m}
	store, err := natsstore.NewClient(m.Conn())
	if err != nil {
		t.Fatal(err)
	}
	f.turns = store
	uiAgent, err := agent.New(m.Conn(), agent.Config{Project: "demo", AgentID: "operator", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	f.agent, err = agent.New(m.Conn(), agent.Config{Project: "demo", AgentID: "planner", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	cfg := webui.Config{Store: f.turns, Conn: m.Conn(), Project: "demo", Agent: uiAgent, Token: testToken, Logger: quiet}
	for _, o := range opts {
		o(&cfg)
	}
	f.ui, err = webui.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(f.ui)
	t.Cleanup(func() {
		f.ui.Close()
		f.srv.Close()
		_ = f.agent.Close()
		_ = uiAgent.Close()
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = m.Stop(sctx)
		cancel()
	})
	return f
}

// call makes a tool call as the planner agent in turn and returns its
// result.
func (f *fixture) call(t *testing.T, turn, tool string, args any) *card.ToolResultContent {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := f.agent.Call(ctx, agent.CallRequest{ToolName: tool, Arguments: raw, AgentTurnID: turn})
	if err != nil && (out == nil || out.Result == nil) {
		t.Fatalf("call %s in %s: %v", tool, turn, err)
	}
	return out.Result
}

// propose parks a hold of what and returns its confirmation id.
func (f *fixture) propose(t *testing.T, turn, what string) string {
	t.Helper()
	res := f.call(t, turn, confirmtest.Tool, map[string]any{"what": what})
	var v struct {
		Status         string `json:"status"`
		ConfirmationID string `json:"confirmation_id"`
	}
	if err := json.Unmarshal(res.Result, &v); err != nil || v.Status != "PENDING_CONFIRM" {
		t.Fatalf("%s result = %s, want PENDING_CONFIRM", confirmtest.Tool, res.Result)
	}
	return v.ConfirmationID
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects, logged in with the token.
func (f *fixture) browser(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(f.srv.URL + "/?token=" + testToken)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: status %d, want 303", resp.StatusCode)
	}
	return c
}

// get fetches path and returns status and body.
func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post submits a form and returns status and body.
func post(t *testing.T, c *http.Client, u string, form url.Values) (int, string) {
	t.Helper()
	resp, err := c.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfRe = regexp.MustCompile(`name="csrf" (?:value|content)="([0-9a-f]+)"`)

// csrf reads the CSRF token from a page.
func csrf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRe.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("page has no csrf field:\n%s", page)
	}
	return m[1]
}

func wantContains(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Fatalf("%s lacks %q:\n%s", what, sub, s)
		}
	}
}
