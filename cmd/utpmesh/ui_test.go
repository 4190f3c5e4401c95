package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/apps/webui"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/catalog"
	"github.com/utpmesh/utpmesh/services/echo"
)

// Environment of the browser test.
const (
	// envRequireBrowser=1 (set by 'make test') makes TestUIBrowser fail,
	// not skip, when no Chromium is found.
	envRequireBrowser = "UTPMESH_REQUIRE_BROWSER"
	// envChromium names the browser binary (default: chromium on $PATH).
	envChromium = "UTPMESH_CHROMIUM"
	// envScreenshot=1 makes TestUIBrowser write docs/img/ui-turn.png.
	envScreenshot = "UTPMESH_UI_SCREENSHOT"
)

// TestUIUsage: flag mistakes are usage errors (exit 2) that say what to
// type instead.
func TestUIUsage(t *testing.T) {
	cm := startCLIMesh(t)
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"short token", []string{"ui", "--ui-token", "short"}, 2, "at least 16"},
		{"token and open", []string{"ui", "--ui-token", "0123456789abcdef0123", "--ui-open", "--listen", "127.0.0.1:0"}, 2, "contradict"},
		{"argument", []string{"ui", "extra"}, 2, "flags only"},
		{"bad project", []string{"ui", "--project", "a.b"}, 2, "--project"},
		{"bad listen", []string{"ui", "--listen", "127.0.0.1:notaport"}, 2, "--listen 127.0.0.1:notaport: listen 127.0.0.1:notaport: "},
		{"bad listen says the form", []string{"ui", "--listen", "127.0.0.1:notaport"}, 2, "(want HOST:PORT, e.g. 127.0.0.1:8080; port 0 picks a free one)"},
		{"typo", []string{"ui", "--ui-opne"}, 2, "did you mean --ui-open"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := cm.run(t, c.args...)
			if r.code != c.code || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("exit %d, want %d with %q\nstdout:\n%s\nstderr:\n%s", r.code, c.code, c.want, r.stdout, r.stderr)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for the command's logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestUICommand runs 'utpmesh ui' until its context ends: it prints the
// URL with the token, the URL logs a browser in, and --ui-open is logged.
func TestUICommand(t *testing.T) {
	cm := startCLIMesh(t)
	cases := []struct {
		name    string
		args    []string
		envTok  string // $UTPMESH_UI_TOKEN
		token   string // in the printed URL ("": none)
		stderr  string
		noToken int // status of / without the token
	}{
		{"token flag", []string{"--ui-token", "0123456789abcdef0123"}, "", "0123456789abcdef0123", "ui: serving", http.StatusUnauthorized},
		{"token env", nil, "fromtheenvironment42", "fromtheenvironment42", "ui: serving", http.StatusUnauthorized},
		{"random token", nil, "", "random", "ui: serving", http.StatusUnauthorized},
		{"open", []string{"--ui-open"}, "", "", "access token OFF (--ui-open)", http.StatusOK},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pr, pw := io.Pipe()
			var errb syncBuffer
			done := make(chan int, 1)
			go func() {
				defer pw.Close()
				done <- run(ctx, append([]string{"ui", "--listen", "127.0.0.1:0", "--nats", cm.url}, c.args...),
					env{stdout: pw, stderr: &errb, getenv: func(k string) string {
						if k == "UTPMESH_UI_TOKEN" {
							return c.envTok
						}
						return ""
					}})
			}()
			line, err := bufio.NewReader(pr).ReadString('\n')
			if err != nil {
				t.Fatalf("no URL printed: %v\nstderr:\n%s", err, errb.String())
			}
			go func() { _, _ = io.Copy(io.Discard, pr) }()
			_, u, ok := strings.Cut(strings.TrimSpace(line), " at ")
			_, tok, _ := strings.Cut(u, "?token=")
			if !ok || (c.token == "random" && len(tok) < 16) || (c.token != "random" && tok != c.token) {
				t.Fatalf("printed %q, want the token %s", line, c.token)
			}
			base, _, _ := strings.Cut(u, "?")
			plain := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := plain.Get(base)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.noToken {
				t.Fatalf("GET %s: %d, want %d", base, resp.StatusCode, c.noToken)
			}
			jar, _ := cookiejar.New(nil)
			resp, err = (&http.Client{Jar: jar}).Get(u)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "project <b>demo</b>") {
				t.Fatalf("GET %s: %d\n%s", u, resp.StatusCode, body)
			}
			if !strings.Contains(errb.String(), c.stderr) {
				t.Fatalf("stderr lacks %q:\n%s", c.stderr, errb.String())
			}
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("exit %d\n%s", code, errb.String())
			}
		})
	}
}

// TestUIBesideUp: 'utpmesh ui' without --listen beside a local up, whose
// UI holds the default address, serves on a free port and says so on
// stderr; with --listen naming a taken address it fails saying what to
// pass.
func TestUIBesideUp(t *testing.T) {
	cm := startCLIMesh(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0") // up's UI, in the test's place
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	saved := defaultUIListen
	defaultUIListen = busy.Addr().String()
	t.Cleanup(func() { defaultUIListen = saved })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var errb syncBuffer
	done := make(chan int, 1)
	go func() {
		defer pw.Close()
		done <- run(ctx, []string{"ui", "--nats", cm.url}, env{stdout: pw, stderr: &errb, getenv: func(string) string { return "" }})
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no URL printed: %v\nstderr:\n%s", err, errb.String())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	_, u, _ := strings.Cut(strings.TrimSpace(line), " at ")
	notice := "utpmesh ui: " + busy.Addr().String() + " is taken (a local 'utpmesh up' serves its own UI there, at the ui address of its banner); listening on a free port of 127.0.0.1 instead (--listen picks one)\n"
	if !strings.HasPrefix(u, "http://127.0.0.1:") || strings.HasPrefix(u, "http://"+busy.Addr().String()) || !strings.HasPrefix(errb.String(), notice) {
		t.Fatalf("printed %q, stderr:\n%s\nwant another port of 127.0.0.1 and the notice %q", line, errb.String(), notice)
	}
	jar, _ := cookiejar.New(nil)
	resp, err := (&http.Client{Jar: jar}).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", u, resp.StatusCode)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}

	r := cm.run(t, "ui", "--listen", busy.Addr().String())
	want := "utpmesh ui: ui listen " + busy.Addr().String() + ": address already in use; is a 'utpmesh up' or another 'utpmesh ui' serving there? pass --listen 127.0.0.1:0 for a free port\n"
	if r.code != 1 || r.stderr != want {
		t.Fatalf("--listen on a taken address: exit %d, stderr %q; want exit 1 and %q", r.code, r.stderr, want)
	}
}

// chromium returns the browser to drive, or skips (fails under 'make
// test') when there is none.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(envChromium); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium found (looked for chromium, chromium-browser, google-chrome on $PATH, and $" + envChromium + "): install it (apt-get install chromium) or run 'make test', which does"
	if os.Getenv(envRequireBrowser) == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// TestUIBrowser drives the UI in a real headless Chromium against a real
// mesh with the Cedar gate on: the turn list loads, a call made while the
// page is open appears without a reload, a running call turns into a
// result live on its turn's page, Confirm on a parked ATLAS call makes
// the ATLAS_CONFIRM call as the mandate's agent, and Replay re-runs the
// turn with that mandate and shows the diff. With
// UTPMESH_UI_SCREENSHOT=1 it saves docs/img/ui-turn.png.
func TestUIBrowser(t *testing.T) {
	browser := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// A mesh as 'utpmesh up' runs it (gate on, demo mandate), serving
	// echo, fail, hold (runs until the test releases it) and ATLAS.
	dir := t.TempDir()
	late := catalog.NewLate()
	tools, err := catalog.Build([]string{"atlas.calendar", "atlas.utility"}, catalog.Deps{DataDir: dir, Context: ctx, Late: late})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var releaseOnce sync.Once
	tools = append(tools, echo.Tool(),
		worker.Tool{Name: "fail", Description: "always fails", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
			return worker.Result{}, worker.Fail(card.CodeBadRequest, "the city is unknown")
		}},
		worker.Tool{Name: "hold", Description: "runs until released", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
			select {
			case <-release:
				return worker.OK(map[string]any{"held": true}), nil
			case <-ctx.Done():
				return worker.Result{}, ctx.Err()
			}
		}})
	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Tools: tools, Logger: atlasQuietLog, Auth: &mesh.AuthConfig{}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		releaseOnce.Do(func() { close(release) })
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = m.Stop(sctx)
	}()
	late.Set(m.Conn(), m.Cards())
	if _, err := setupAuth(ctx, m); err != nil {
		t.Fatal(err)
	}
	cf := callerFlags{mandate: "@" + filepath.Join(dir, "demo-mandate.jwt")}
	agentID, mandate, err := cf.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if agentID != "demo-agent" {
		t.Fatalf("the demo mandate's sub is %q, want demo-agent", agentID)
	}
	store, err := natsstore.NewClient(m.Conn())
	if err != nil {
		t.Fatal(err)
	}
	u, stop, err := startUI(ctx, m.Conn(), uiConfig{Listen: "127.0.0.1:0", Mandate: mandate, Store: store, Logger: atlasQuietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	ag, err := agent.New(m.Conn(), agent.Config{Project: "demo", AgentID: agentID, Mandate: mandate, Logger: atlasQuietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close()
	call := func(turn, tool, callID string, args any) *card.ToolResultContent {
		t.Helper()
		raw, _ := json.Marshal(args)
		out, err := ag.Call(ctx, agent.CallRequest{ToolName: tool, Arguments: raw, AgentTurnID: turn, ToolCallID: callID})
		if out == nil || out.Result == nil {
			t.Fatalf("%s: %v", tool, err)
		}
		return out.Result
	}
	call("turn-plan", "echo", "", map[string]any{"greeting": "hello"})
	call("turn-plan", "fail", "", map[string]any{"city": "Atlantis"})
	parked := call("turn-plan", "CALENDAR_CREATE_BLOCKS", "", map[string]any{"date": "2024-01-15",
		"blocks": []map[string]string{{"title": "Deep work", "start": "14:00", "end": "16:00", "type": "focus"}}})
	var pending struct {
		Status         string `json:"status"`
		ConfirmationID string `json:"confirmation_id"`
	}
	if err := json.Unmarshal(parked.Result, &pending); err != nil || pending.Status != "PENDING_CONFIRM" || pending.ConfirmationID == "" {
		t.Fatalf("CALENDAR_CREATE_BLOCKS: %s", parked.Result)
	}
	call("turn-plan", "echo", "", map[string]any{"summary": "proposed a focus block"})

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	// Start the browser on bctx itself: a browser started under a
	// step's timeout would end with that step.
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatalf("start %s: %v", browser, err)
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, scancel := context.WithTimeout(bctx, 20*time.Second)
		defer scancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			loc, _ := chromedp.Run(bctx, chromedp.Location())
			html, _ := chromedp.Run(bctx, chromedp.OuterHTML(`body`))
			t.Fatalf("browser: %s: %v\nat %s:\n%s", what, err, loc, html)
		}
	}

	// The list loads with the token URL (then the cookie) and goes live.
	// (startUI takes the agent from the mandate, as 'up' will use it.)
	do("open the turn list", chromedp.Navigate(u),
		chromedp.WaitVisible(`a.turn-link[data-turn="turn-plan"]`), chromedp.WaitReady(`body[data-live="on"]`))
	if who, err := chromedp.Run(bctx, chromedp.Text(`header .agent b`)); err != nil || who != agentID {
		t.Fatalf("acting as %q (%v), want the mandate's %s", who, err, agentID)
	}
	if loc, err := chromedp.Run(bctx, chromedp.Location()); err != nil || strings.Contains(loc, "token=") {
		t.Fatalf("location %q (%v): the token should be gone from the address", loc, err)
	}
	// A call made now appears without a reload.
	call("turn-live", "echo", "", map[string]any{"x": 1})
	do("see the new turn live", chromedp.WaitVisible(`a.turn-link[data-turn="turn-live"]`))

	// On the turn's page, a call that starts shows up running, then
	// finishes, live.
	do("open the turn", chromedp.Click(`a.turn-link[data-turn="turn-plan"]`),
		chromedp.WaitVisible(`div.confirmation[data-confirmation="`+pending.ConfirmationID+`"] button.confirm-btn`),
		chromedp.WaitReady(`body[data-live="on"]`))
	held := make(chan error, 1)
	go func() {
		raw, _ := json.Marshal(map[string]any{"step": "wait for the user"})
		_, err := ag.Call(ctx, agent.CallRequest{ToolName: "hold", Arguments: raw, AgentTurnID: "turn-plan", ToolCallID: "call-hold"})
		held <- err
	}()
	do("see the running call", chromedp.WaitVisible(`details[data-call="call-hold"][data-status="pending"]`))
	if os.Getenv(envScreenshot) == "1" {
		png, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join("..", "..", "docs", "img"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "img", "ui-turn.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	releaseOnce.Do(func() { close(release) })
	if err := <-held; err != nil {
		t.Fatalf("hold: %v", err)
	}
	do("see it finish", chromedp.WaitVisible(`details[data-call="call-hold"][data-status="success"]`))

	// Confirm makes the ATLAS_CONFIRM call; the turn then shows it resolved.
	do("confirm", chromedp.Click(`div.confirmation[data-confirmation="`+pending.ConfirmationID+`"] button.confirm-btn`),
		chromedp.WaitVisible(`#outcome`))
	outcome, err := chromedp.Run(bctx, chromedp.Text(`#outcome`))
	if err != nil || strings.TrimSpace(outcome) != "OK" {
		html, _ := chromedp.Run(bctx, chromedp.OuterHTML(`main`))
		t.Fatalf("outcome %q (%v), want OK:\n%s", outcome, err, html)
	}
	do("back to the turn", chromedp.Click(`#back`),
		chromedp.WaitVisible(`div.confirmation.OK[data-confirmation="`+pending.ConfirmationID+`"]`))

	// Replay re-runs the five calls with the operator's mandate (the gate
	// lets them through) and diffs them: the parked ATLAS call parks again
	// under another confirmation id; the others come out equal.
	do("replay", chromedp.Click(`button.replay-btn`), chromedp.WaitVisible(`#replay-summary`))
	summary, err := chromedp.Run(bctx, chromedp.Text(`#replay-summary`))
	if err != nil || !strings.Contains(summary, "4 equal") || !strings.Contains(summary, "1 different") || !strings.Contains(summary, "0 errors") {
		html, _ := chromedp.Run(bctx, chromedp.OuterHTML(`main`))
		t.Fatalf("replay summary %q (%v), want 4 equal, 1 different, 0 errors:\n%s", summary, err, html)
	}
}

// TestUpKeepsUIToken: up's UI token is the one kept in DATA/ui-token
// (mode 0600, made at the first start), so a restart serves the same
// token and an open tab's cookie keeps working; deleting the file gives a
// new one.
func TestUpKeepsUIToken(t *testing.T) {
	clone := t.TempDir()
	tokenFile := filepath.Join(clone, "utpmesh-data", webui.TokenFile)
	start := func() (token string, stop func()) {
		t.Helper()
		up, _, banner := startREADMEUp(t, clone, guideEnv("UTPMESH_TEST_EXEC=1"))
		m := regexp.MustCompile(`(?m)^\s+ui\s+http://\S+\?token=(\S+)$`).FindStringSubmatch(banner)
		if m == nil {
			t.Fatalf("up printed no ui URL with a token:\n%s", banner)
		}
		return m[1], func() {
			t.Helper()
			if err := up.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			if err := up.Wait(); err != nil {
				t.Fatalf("up after Ctrl-C: %v", err)
			}
		}
	}
	first, stop := start()
	stop()
	b, err := os.ReadFile(tokenFile)
	fi, serr := os.Stat(tokenFile)
	if err != nil || serr != nil || strings.TrimSpace(string(b)) != first || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %q (%v, %v), mode %v; want the banner's token %q, mode 0600", tokenFile, b, err, serr, fi.Mode().Perm(), first)
	}
	again, stop := start()
	stop()
	if again != first {
		t.Fatalf("after a restart the token is %q, want %q kept", again, first)
	}
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	rotated, stop := start()
	stop()
	if rotated == first || len(rotated) < webui.MinTokenLen {
		t.Fatalf("after deleting %s the token is %q, want a new one", tokenFile, rotated)
	}
}
