package webui_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/apps/webui"
)

// queue is a test catalogue's escalation queue: items in memory, decided
// through the UI's operator call.
type queue struct {
	mu      sync.Mutex
	items   []webui.Escalation
	decided map[string]string
}

func (q *queue) Kind() string { return "test items" }

func (q *queue) Pending(ctx context.Context, call webui.OperatorCall) ([]webui.Escalation, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []webui.Escalation
	for _, it := range q.items {
		if q.decided[it.ID] == "" {
			out = append(out, it)
		}
	}
	return out, nil
}

func (q *queue) Decide(ctx context.Context, call webui.OperatorCall, id string, yes bool, reason string) (webui.Decision, error) {
	if _, err := call(ctx, "echo", json.RawMessage(`{"id":"`+id+`"}`)); err != nil {
		return webui.Decision{}, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.decided[id] != "" {
		return webui.Decision{}, errors.New("already decided")
	}
	st := "COMPLETE"
	if !yes {
		st = "DECLINED"
	}
	q.decided[id] = st
	return webui.Decision{Status: st, Operator: "alice", Summary: "reason: " + reason}, nil
}

// TestEscalations: /escalations lists a queue's items with deadline and
// prompt (overdue marked), earliest first; a decision is refused without
// operator credentials, a decline without a reason, an unknown queue or
// decision; a confirmation shows the operator who decided.
func TestEscalations(t *testing.T) {
	now := time.Now()
	q := &queue{decided: map[string]string{}, items: []webui.Escalation{
		{ID: "late", Title: "HEM-01", Prompt: "move the guests", From: "planner", Deadline: now.Add(time.Hour)},
		{ID: "early", Title: "HEM-MANDATE-01", Prompt: `asks for ATPAction::"notify_traveller"`, From: "planner", Deadline: now.Add(-time.Minute)},
	}}
	t.Run("without operator credentials", func(t *testing.T) {
		f := newFixture(t, func(c *webui.Config) { c.Escalations = []webui.Escalations{q} })
		c := f.browser(t)
		code, page := get(t, c, f.srv.URL+"/escalations")
		if code != http.StatusOK || !strings.Contains(page, `id="no-operator"`) || strings.Contains(page, `data-escalation=`) {
			t.Fatalf("status %d:\n%s", code, page)
		}
		code, body := post(t, c, f.srv.URL+"/escalations/decide", url.Values{"csrf": {csrf(t, page)}, "source": {"0"}, "id": {"early"}, "decision": {"confirm"}})
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "--operator-creds") {
			t.Fatalf("decide without operator: %d\n%s", code, body)
		}
	})
	t.Run("with an operator", func(t *testing.T) {
		var f *fixture
		f = newFixture(t, func(c *webui.Config) {
			c.Escalations = []webui.Escalations{q}
			c.Operator = func(ctx context.Context, tool string, args json.RawMessage) (*agent.Outcome, error) {
				return f.agent.Call(ctx, agent.CallRequest{ToolName: tool, Arguments: args, AgentTurnID: "ui-operator"})
			}
		})
		c := f.browser(t)
		code, page := get(t, c, f.srv.URL+"/escalations")
		if code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
		wantContains(t, "escalations", page, `data-escalation="early"`, `data-escalation="late"`, "overdue", "asks for ATPAction::&#34;notify_traveller&#34;")
		if strings.Index(page, `data-escalation="early"`) > strings.Index(page, `data-escalation="late"`) {
			t.Fatal("not earliest deadline first")
		}
		tok := csrf(t, page)
		for _, tc := range []struct {
			form url.Values
			want string
		}{
			{url.Values{"source": {"0"}, "id": {"early"}, "decision": {"decline"}}, "needs a reason"},
			{url.Values{"source": {"7"}, "id": {"early"}, "decision": {"confirm"}}, "not one of this UI&#39;s escalation queues"},
			{url.Values{"source": {"0"}, "id": {"early"}, "decision": {"maybe"}}, "want confirm or decline"},
			{url.Values{"source": {"0"}, "decision": {"confirm"}}, "id is missing"},
		} {
			tc.form.Set("csrf", tok)
			if code, body := post(t, c, f.srv.URL+"/escalations/decide", tc.form); code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
				t.Fatalf("%v: %d, want 400 %q:\n%s", tc.form, code, tc.want, body)
			}
		}
		code, body := post(t, c, f.srv.URL+"/escalations/decide", url.Values{"csrf": {tok}, "source": {"0"}, "id": {"early"}, "decision": {"confirm"}})
		if code != http.StatusOK {
			t.Fatalf("confirm: %d\n%s", code, body)
		}
		wantContains(t, "decision", body, "COMPLETE", `<b id="decided-by">alice</b>`)
		code, body = post(t, c, f.srv.URL+"/escalations/decide", url.Values{"csrf": {tok}, "source": {"0"}, "id": {"early"}, "decision": {"confirm"}})
		if code != http.StatusConflict || !strings.Contains(body, "already decided") {
			t.Fatalf("second confirm: %d\n%s", code, body)
		}
		if _, page := get(t, c, f.srv.URL+"/escalations"); strings.Contains(page, `data-escalation="early"`) {
			t.Fatal("a decided item is still listed")
		}
	})
}
