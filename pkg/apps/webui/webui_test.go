package webui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/apps/webui"
	"github.com/utpmesh/utpmesh/pkg/confirm/confirmtest"
)

// TestAccess: the token is needed once in the URL, becomes an HttpOnly
// SameSite=Strict cookie, and is dropped from the address; --ui-open
// needs none.
func TestAccess(t *testing.T) {
	f := newFixture(t)
	open := newFixture(t, openUI)
	plain := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	cases := []struct {
		name     string
		srv      string
		path     string
		status   int
		contains string
	}{
		{"no token", f.srv.URL, "/", http.StatusUnauthorized, "?token="},
		{"no token on a turn", f.srv.URL, "/turns/x", http.StatusUnauthorized, "--ui-token"},
		{"no token on events", f.srv.URL, "/events", http.StatusUnauthorized, "?token="},
		{"wrong token", f.srv.URL, "/?token=nope", http.StatusUnauthorized, "is not this UI"},
		{"right token", f.srv.URL, "/?token=" + testToken, http.StatusSeeOther, ""},
		{"open UI", open.srv.URL, "/", http.StatusOK, "open (no token)"},
		{"static needs no token", f.srv.URL, "/static/ui.js", http.StatusOK, "EventSource"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := get(t, plain, c.srv+c.path)
			if status != c.status {
				t.Fatalf("GET %s: status %d, want %d\n%s", c.path, status, c.status, body)
			}
			wantContains(t, "body", body, c.contains)
		})
	}
	resp, err := plain.Get(f.srv.URL + "/turns/t1?token=" + testToken + "&x=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); loc != "/turns/t1?x=1" {
		t.Fatalf("redirect to %q, want the same page without the token", loc)
	}
	ck := resp.Cookies()
	if len(ck) != 1 || ck[0].Name != webui.CookieName || ck[0].Value != testToken || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie = %+v, want %s HttpOnly SameSite=Strict", ck, webui.CookieName)
	}
	c := f.browser(t)
	if status, body := get(t, c, f.srv.URL+"/"); status != http.StatusOK || !strings.Contains(body, "Turns") {
		t.Fatalf("with the cookie: status %d\n%s", status, body)
	}
}

// TestConfig: a config that cannot work is refused with what to fix.
func TestConfig(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name string
		cfg  webui.Config
		want string
	}{
		{"no store", webui.Config{Project: "demo", Token: testToken}, "Store is required"},
		{"bad project", webui.Config{Store: f.turns, Project: "a.b", Token: testToken}, "project_id"},
		{"short token", webui.Config{Store: f.turns, Project: "demo", Token: "short"}, "at least 16"},
		{"no token", webui.Config{Store: f.turns, Project: "demo"}, "at least 16"},
		{"page size", webui.Config{Store: f.turns, Project: "demo", Token: testToken, PageSize: cardstore.MaxPage + 1}, "page size"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := webui.New(c.cfg)
			if !errors.Is(err, webui.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrInvalid naming %q", err, c.want)
			}
		})
	}
}

// TestTurnPages: the list, a turn's timeline with both cards of each call,
// and the errors for a turn that is not there.
func TestTurnPages(t *testing.T) {
	f := newFixture(t)
	f.call(t, "turn-a", "echo", map[string]any{"x": 1})
	f.call(t, "turn-a", "fail", map[string]any{})
	f.call(t, "turn-b", "echo", map[string]any{"y": 2})
	c := f.browser(t)

	_, index := get(t, c, f.srv.URL+"/")
	wantContains(t, "index", index, `href="/turns/turn-a"`, `href="/turns/turn-b"`, "planner")
	if strings.Index(index, "turn-b") > strings.Index(index, "turn-a") {
		t.Fatalf("index lists turn-a before turn-b; want newest first:\n%s", index)
	}
	_, frag := get(t, c, f.srv.URL+"/fragments/turns")
	if strings.Contains(frag, "<html") || !strings.Contains(frag, `data-turn="turn-b"`) {
		t.Fatalf("fragment is not the bare list:\n%s", frag)
	}

	status, page := get(t, c, f.srv.URL+"/turns/turn-a")
	if status != http.StatusOK {
		t.Fatalf("turn page: %d\n%s", status, page)
	}
	wantContains(t, "turn page", page,
		`data-status="success"`, `data-status="failed"`, `class="bar success"`, `class="bar failed"`,
		"&#34;type&#34;: &#34;tool.call&#34;", "&#34;type&#34;: &#34;tool.result&#34;", // both cards, pretty JSON
		"bad_request: fail always fails", `action="/turns/turn-a/replay"`)
	_, tf := get(t, c, f.srv.URL+"/fragments/turns/turn-a")
	if strings.Contains(tf, "<html") || !strings.Contains(tf, `data-status="failed"`) {
		t.Fatalf("turn fragment:\n%s", tf)
	}

	cases := []struct {
		path   string
		status int
		want   string
	}{
		{"/turns/no-such-turn", http.StatusNotFound, "--project P"},
		{"/open?turn=turn-b", http.StatusSeeOther, ""},
		{"/open", http.StatusBadRequest, "type a turn id"},
		{"/?before=x", http.StatusBadRequest, "older"},
		{"/nothing/here", http.StatusNotFound, "turn list"},
	}
	for _, cs := range cases {
		status, body := get(t, c, f.srv.URL+cs.path)
		if status != cs.status || !strings.Contains(body, cs.want) {
			t.Fatalf("GET %s: %d, want %d with %q\n%s", cs.path, status, cs.status, cs.want, body)
		}
	}
}

// TestNoTurnList: a CardStore that cannot list turns (e.g. a mesh too old
// for list_turns) still serves the UI and says how to open a turn.
func TestNoTurnList(t *testing.T) {
	f := newFixture(t)
	ui, err := webui.New(webui.Config{Store: noList{f.turns}, Project: "demo", Open: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer ui.Close()
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	rec := httptest.NewRecorder()
	ui.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), "opened by its id") || !strings.Contains(rec.Body.String(), "no live feed") {
		t.Fatalf("status %d\n%s", rec.Code, rec.Body.String())
	}
}

type noList struct{ cardstore.Store }

func (noList) ListTurns(context.Context, cardstore.ListTurnsRequest) (*cardstore.ListTurnsResult, error) {
	return nil, errors.New(`svc: bad request: service cardstore has no operation "list_turns"`)
}

// TestEvents: the live feed names the turn of a call dispatched and of its
// result, and only of the UI's project.
func TestEvents(t *testing.T) {
	f := newFixture(t)
	c := f.browser(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/events", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events := make(chan [2]string, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		var name string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			} else if v, ok := strings.CutPrefix(line, "data: "); ok {
				events <- [2]string{name, v}
			}
		}
	}()
	next := func() (string, webui.Event) {
		t.Helper()
		var ev [2]string
		var ok bool
		select {
		case ev, ok = <-events:
		case <-time.After(time.Minute): // a guard against a hang, not a speed check
			t.Fatal("no event within a minute: the live feed missed it")
		}
		if !ok {
			t.Fatal("event stream ended")
		}
		var e webui.Event
		if ev[0] == "turn" {
			if err := json.Unmarshal([]byte(ev[1]), &e); err != nil {
				t.Fatal(err)
			}
		}
		return ev[0], e
	}
	if name, _ := next(); name != "hello" {
		t.Fatalf("first event %q, want hello", name)
	}
	f.call(t, "turn-live", "echo", map[string]any{"x": 1})
	seen := map[string]bool{}
	for !seen["call"] || !seen["result"] {
		name, e := next()
		if name != "turn" || e.Turn != "turn-live" || e.ToolCallID == "" {
			t.Fatalf("event %s %+v, want a turn event of turn-live", name, e)
		}
		seen[e.Kind] = true
	}
}

// TestActionsNeedCSRF: every POST needs the page's CSRF token and a
// same-origin request.
func TestActionsNeedCSRF(t *testing.T) {
	f := newFixture(t)
	c := f.browser(t)
	f.call(t, "turn-c", "echo", map[string]any{})
	_, tp := get(t, c, f.srv.URL+"/turns/turn-c")
	token := csrf(t, tp)
	cases := []struct {
		name   string
		form   url.Values
		header map[string]string
		status int
		want   string
	}{
		{"no csrf", url.Values{"confirmation_id": {"cfm_calendar_x"}}, nil, http.StatusForbidden, "reload the page"},
		{"wrong csrf", url.Values{"csrf": {"00"}, "confirmation_id": {"cfm_calendar_x"}}, nil, http.StatusForbidden, "reload the page"},
		{"cross-site", url.Values{"csrf": {token}, "confirmation_id": {"cfm_calendar_x"}}, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, "another site"},
		{"foreign origin", url.Values{"csrf": {token}, "confirmation_id": {"cfm_calendar_x"}}, map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden, "another site"},
		{"no id", url.Values{"csrf": {token}}, nil, http.StatusBadRequest, "confirmation_id is missing"},
		{"too long", url.Values{"csrf": {token}, "confirmation_id": {strings.Repeat("x", 129)}, "turn": {"turn-c"}}, nil, http.StatusBadRequest, "longer than a confirmation id"},
		{"no turn", url.Values{"csrf": {token}, "confirmation_id": {"task_1"}}, nil, http.StatusBadRequest, "turn is missing"},
		{"not in the turn", url.Values{"csrf": {token}, "confirmation_id": {"task_1"}, "turn": {"turn-c"}}, nil, http.StatusBadRequest, "is not a confirmation of turn turn-c"},
	}
	for _, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/confirm", strings.NewReader(cs.form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for k, v := range cs.header {
				req.Header.Set(k, v)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			body := string(b)
			if resp.StatusCode != cs.status || !strings.Contains(body, cs.want) {
				t.Fatalf("status %d, want %d with %q\n%s", resp.StatusCode, cs.status, cs.want, body)
			}
		})
	}
}

// TestConfirmCancel: a parked call (the confirmation convention, here with
// the hold catalogue's own resolver tools) shows Confirm and Cancel; they
// call the resolvers the pending result names as the UI's agent, and the
// turn then shows how the confirmation was resolved.
func TestConfirmCancel(t *testing.T) {
	f := newFixture(t)
	id1 := f.propose(t, "turn-plan", "room 1")
	id2 := f.propose(t, "turn-plan", "room 2")
	c := f.browser(t)
	_, page := get(t, c, f.srv.URL+"/turns/turn-plan")
	wantContains(t, "turn page", page, `data-confirmation="`+id1+`"`, `data-confirmation="`+id2+`"`,
		`value="`+id1+`"`, "Confirm", "Cancel", `class="bar confirm"`, "waiting for confirmation", "acting as agent <b>operator</b>")
	token := csrf(t, page)

	status, out := post(t, c, f.srv.URL+"/confirm", url.Values{"csrf": {token}, "confirmation_id": {id1}, "turn": {"turn-plan"}})
	if status != http.StatusOK {
		t.Fatalf("confirm: %d\n%s", status, out)
	}
	wantContains(t, "confirm outcome", out, `id="outcome"`, confirmtest.ConfirmTool, "OK", "room 1", `href="/turns/turn-plan"`)
	status, out = post(t, c, f.srv.URL+"/cancel", url.Values{"csrf": {token}, "confirmation_id": {id2}, "turn": {"turn-plan"}})
	if status != http.StatusOK || !strings.Contains(out, "SKIPPED") || !strings.Contains(out, confirmtest.CancelTool) {
		t.Fatalf("cancel: %d\n%s", status, out)
	}
	status, out = post(t, c, f.srv.URL+"/confirm", url.Values{"csrf": {token}, "confirmation_id": {id1}, "turn": {"turn-plan"}})
	if status != http.StatusConflict || !strings.Contains(out, "already used") {
		t.Fatalf("second confirm: %d, want 409 already used\n%s", status, out)
	}

	_, page = get(t, c, f.srv.URL+"/turns/turn-plan")
	wantContains(t, "turn page after", page, `class="confirmation OK" data-confirmation="`+id1+`"`,
		`class="confirmation SKIPPED" data-confirmation="`+id2+`"`)
	if strings.Contains(page, `class="confirm-btn"`) {
		t.Fatalf("resolved confirmations still offer Confirm:\n%s", page)
	}
}

// TestReadOnly: without an agent the UI shows no buttons and refuses the
// actions, saying how to enable them.
func TestReadOnly(t *testing.T) {
	f := newFixture(t, readOnly)
	f.propose(t, "turn-ro", "room 3")
	c := f.browser(t)
	_, page := get(t, c, f.srv.URL+"/turns/turn-ro")
	wantContains(t, "page", page, "read-only", "waiting for confirmation")
	if strings.Contains(page, `class="confirm-btn"`) || strings.Contains(page, `class="replay-btn"`) {
		t.Fatalf("read-only UI offers actions:\n%s", page)
	}
	status, out := post(t, c, f.srv.URL+"/turns/turn-ro/replay", url.Values{"csrf": {csrf(t, page)}})
	if status != http.StatusServiceUnavailable || !strings.Contains(out, "--mandate") {
		t.Fatalf("replay: %d\n%s", status, out)
	}
}

// TestReplay: replaying a turn re-runs its calls under a new turn and
// shows the diff of each result.
func TestReplay(t *testing.T) {
	f := newFixture(t)
	f.call(t, "turn-r", "echo", map[string]any{"x": 1})
	f.call(t, "turn-r", "fail", map[string]any{})
	c := f.browser(t)
	_, page := get(t, c, f.srv.URL+"/turns/turn-r")
	wantContains(t, "page", page, "Re-runs 2 calls")
	status, out := post(t, c, f.srv.URL+"/turns/turn-r/replay", url.Values{"csrf": {csrf(t, page)}})
	if status != http.StatusOK {
		t.Fatalf("replay: %d\n%s", status, out)
	}
	wantContains(t, "replay report", out, `id="replay-summary"`, "2 equal", "0 different", "0 errors", `href="/turns/replay-`)
	status, out = post(t, c, f.srv.URL+"/turns/nope/replay", url.Values{"csrf": {csrf(t, page)}})
	if status != http.StatusNotFound {
		t.Fatalf("replay of a missing turn: %d\n%s", status, out)
	}
}
