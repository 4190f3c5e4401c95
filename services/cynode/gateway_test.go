package cynode_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/services/cynode"
	"github.com/utpmesh/utpmesh/services/cynode/audit"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/store"
)

// seed puts a task of the test project, a task of another project and a
// job of the first.
func seed(t *testing.T, h *ct.Harness) {
	t.Helper()
	ctx := context.Background()
	st := h.Service.Store
	for _, err := range []error{
		st.PutTask(ctx, store.Task{ID: "t1", ProjectID: ct.Project, Title: "build", UserID: "alice"}),
		st.PutTask(ctx, store.Task{ID: "t-foreign", ProjectID: ct.Other, Title: "theirs"}),
		st.PutJob(ctx, store.Job{ID: "j1", TaskID: "t1"}),
		st.PutJob(ctx, store.Job{ID: "j-foreign", TaskID: "t-foreign"}),
		st.PutProject(ctx, store.Project{ID: ct.Project, Slug: "demo", DisplayName: "Demo"}),
		st.PutProject(ctx, store.Project{ID: ct.Other, Slug: "other", DisplayName: "Other"}),
		st.PutProject(ctx, store.Project{ID: "p-shared", Slug: "shared", DisplayName: "Shared", Description: "shared with alice"}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestGatewayAllowlists is the gateway's table: agent type × tool →
// allowed or refused, with the refusal's error type.
func TestGatewayAllowlists(t *testing.T) {
	h := ct.Start(t, nil)
	seed(t, h)
	put := map[string]any{"task_id": "t1", "path": "a.txt", "content_bytes_base64": b64("x")}
	for _, tc := range []struct {
		agent string
		tool  string
		args  map[string]any
		want  string // "" allowed, else the error type
	}{
		{ct.PMAgent, "artifact.put", put, ""},
		{ct.PAAgent, "artifact.put", put, ""},
		{ct.SandboxAgent, "artifact.put", put, ""},
		{ct.SandboxAgent, "artifact.list", map[string]any{"task_id": "t1"}, ""},
		{ct.PMAgent, "db.task.get", map[string]any{"task_id": "t1"}, ""},
		{ct.PAAgent, "db.task.get", map[string]any{"task_id": "t1"}, ""},
		{ct.SandboxAgent, "db.task.get", map[string]any{"task_id": "t1"}, "not_allowed"},
		{ct.SandboxAgent, "db.system_setting.list", map[string]any{}, "not_allowed"},
		{ct.PAAgent, "db.task.update_status", map[string]any{"task_id": "t1", "status": "running"}, "not_allowed"},
		{ct.PAAgent, "db.system_setting.create", map[string]any{"key": "k", "value": 1, "value_type": "number"}, "operator_only"},
		{ct.PAAgent, "db.preference.effective", map[string]any{"task_id": "t1"}, ""},
		{ct.PMAgent, "db.project.list", map[string]any{}, ""},
		{ct.Unregistered, "artifact.list", map[string]any{"task_id": "t1"}, "unauthenticated"},
		{ct.NoMandate, "artifact.list", map[string]any{"task_id": "t1"}, "unauthenticated"},
	} {
		r := h.Call(tc.agent, tc.tool, tc.args)
		if tc.want == "" {
			if r.Status != card.StatusSuccess || ct.Str(r.Envelope, "status") != "success" {
				t.Errorf("%s × %s: want allowed, got %s %+v", tc.agent, tc.tool, r.Status, r.Error)
			}
			continue
		}
		if tc.want == "operator_only" { // refused by the mesh's admission before any worker
			if r.Status != card.StatusFailed || r.Error == nil || r.Error.Code != card.CodeAuthFailed || ct.Str(r.Envelope, "reason") != "operator_only" {
				t.Errorf("%s × %s: want refused operator_only (auth_failed) by the admission, got %s %+v envelope %v", tc.agent, tc.tool, r.Status, r.Error, r.Envelope)
			}
			continue
		}
		if r.Status != card.StatusFailed || r.ErrorType() != tc.want || r.Error.Code != card.CodeAuthFailed {
			t.Errorf("%s × %s: want refused %s (auth_failed), got %s %+v envelope %v", tc.agent, tc.tool, tc.want, r.Status, r.Error, r.Envelope)
		}
	}
}

// TestGatewayRules covers the rules after the allowlist: a disabled tool
// is refused although allowed, access policies (Cedar on
// mcp.tool.invoke), task scoping and the size limits.
func TestGatewayRules(t *testing.T) {
	cfg := ct.Config()
	cfg.DisabledTools = []string{"artifact.get"}
	cfg.AccessPolicies += "\n@id(\"no-pa-artifact-list\")\nforbid(principal, action == Action::\"mcp.tool.invoke\", resource == McpTool::\"artifact.list\") when { context.agent_type == \"pa\" };\n"
	cfg.Limits = cynode.Limits{MaxTextBytes: 64, MaxInputBytes: 4096, MaxResponseBytes: 2048, MaxArtifactBytes: 1500}
	h := ct.Start(t, cfg)
	seed(t, h)

	for _, tc := range []struct {
		name  string
		agent string
		tool  string
		args  map[string]any
		want  string
		code  card.ErrorCode
		msg   string
	}{
		{"disabled although allowed", ct.PMAgent, "artifact.get", map[string]any{"task_id": "t1", "path": "a"}, "tool_disabled", card.CodeAuthFailed, "disabled by the administrator"},
		{"cedar forbid", ct.PAAgent, "artifact.list", map[string]any{"task_id": "t1"}, "access_denied", card.CodeAuthFailed, "no-pa-artifact-list"},
		{"missing task", ct.PMAgent, "artifact.list", map[string]any{}, "", card.CodeBadRequest, "task_id"},
		{"unknown task", ct.PMAgent, "artifact.list", map[string]any{"task_id": "t-nope"}, "not_found", card.CodeBadRequest, "does not exist in project demo"},
		{"foreign task", ct.PMAgent, "artifact.list", map[string]any{"task_id": "t-foreign"}, "not_found", card.CodeBadRequest, "does not exist in project demo"},
		{"foreign job", ct.PMAgent, "db.job.get", map[string]any{"job_id": "j-foreign"}, "not_found", card.CodeBadRequest, "does not exist in project demo"},
		{"over-size text", ct.PMAgent, "artifact.put", map[string]any{"task_id": "t1", "path": strings.Repeat("p", 65), "content_bytes_base64": ""}, "size_limit_exceeded", card.CodeBadRequest, "argument path"},
		{"over-size input", ct.PMAgent, "artifact.put", map[string]any{"task_id": "t1", "path": "big", "content_bytes_base64": b64(strings.Repeat("x", 3100))}, "size_limit_exceeded", card.CodeBadRequest, "max_input_bytes"},
		{"over-size artifact", ct.PMAgent, "artifact.put", map[string]any{"task_id": "t1", "path": "big", "content_bytes_base64": b64(strings.Repeat("x", 1501))}, "size_limit_exceeded", card.CodeBadRequest, "max_artifact_bytes"},
	} {
		r := h.Call(tc.agent, tc.tool, tc.args)
		if r.Status != card.StatusFailed || r.Error == nil || r.Error.Code != tc.code || !strings.Contains(r.Error.Message, tc.msg) {
			t.Errorf("%s: got %s %+v; want %s containing %q", tc.name, r.Status, r.Error, tc.code, tc.msg)
			continue
		}
		if tc.want != "" && (r.ErrorType() != tc.want || ct.Str(r.Envelope, "error", "message") != r.Error.Message) {
			t.Errorf("%s: envelope %v; want error type %s", tc.name, r.Envelope, tc.want)
		}
	}

	{
		// over-size response: a listing of many artifacts overflows
		// max_response_bytes; a smaller page fits.
		for i := 0; i < 20; i++ {
			h.OK(ct.PMAgent, "artifact.put", map[string]any{"task_id": "t1", "path": "many/" + strings.Repeat("n", 40) + string(rune('a'+i)), "content_bytes_base64": b64("x")})
		}
		msg := h.Fail(ct.PMAgent, "artifact.list", map[string]any{"task_id": "t1", "limit": 20}, "response_too_large")
		if !strings.Contains(msg, "max_response_bytes") {
			t.Fatalf("message %q", msg)
		}
		h.OK(ct.PMAgent, "artifact.list", map[string]any{"task_id": "t1", "limit": 2})
	}
}

// TestAuditRecords checks that every invocation, allowed or refused, is
// audited with the seed's fields and without its payload.
func TestAuditRecords(t *testing.T) {
	h := ct.Start(t, nil)
	seed(t, h)
	secret := "TOP-SECRET-CONTENT"
	h.OK(ct.PAAgent, "artifact.put", map[string]any{"task_id": "t1", "path": "notes/secret.txt", "content_bytes_base64": b64(secret), "job_id": "j1", "run_id": "r1"})
	h.Fail(ct.SandboxAgent, "db.task.get", map[string]any{"task_id": "t1"}, "not_allowed")
	h.Fail(ct.PMAgent, "artifact.get", map[string]any{"task_id": "t1", "path": "nope"}, "not_found")

	recs := h.Audit(audit.Filter{})
	if len(recs) != 3 {
		t.Fatalf("%d records: %+v", len(recs), recs)
	}
	put, denied, failed := recs[0], recs[1], recs[2]
	if put.Tool != "artifact.put" || put.Decision != "allow" || put.Status != "success" || put.TaskID != "t1" || put.JobID != "j1" || put.RunID != "r1" ||
		put.ProjectID != ct.Project || put.Subject != ct.PAAgent || put.AgentType != "pa" || put.UserID != "alice" ||
		strings.Join(put.GroupIDs, ",") != "eng" || strings.Join(put.RoleNames, ",") != "analyst" || put.Server != "cynode" || put.ErrorType != "" {
		t.Errorf("put record %+v", put)
	}
	if denied.Decision != "deny" || denied.Status != "error" || denied.ErrorType != "not_allowed" || denied.AgentType != "sandbox" {
		t.Errorf("denied record %+v", denied)
	}
	if failed.Decision != "allow" || failed.Status != "error" || failed.ErrorType != "not_found" {
		t.Errorf("failed record %+v", failed)
	}
	// Never the payloads: neither the content nor the path is recorded.
	raw := h.AuditRaw()
	for _, s := range []string{secret, b64(secret), "notes/secret.txt"} {
		if strings.Contains(raw, s) {
			t.Errorf("audit records contain payload %q: %s", s, raw)
		}
	}
	if got := h.Audit(audit.Filter{Tool: "artifact.get"}); len(got) != 1 || got[0].ToolCallID != failed.ToolCallID {
		t.Errorf("filter by tool: %+v", got)
	}
	if got := h.Audit(audit.Filter{TaskID: "t1", Since: put.Time}); len(got) != 3 {
		t.Errorf("filter by task and since: %d", len(got))
	}
	if got := h.Audit(audit.Filter{TaskID: "t-other"}); len(got) != 0 {
		t.Errorf("filter by another task: %+v", got)
	}
}

// TestNoPolicyRefusesEverything: without access policies nothing is
// permitted, whatever the allowlists say (fail closed).
func TestNoPolicyRefusesEverything(t *testing.T) {
	cfg := ct.Config()
	cfg.AccessPolicies = ""
	h := ct.Start(t, cfg)
	seed(t, h)
	msg := h.Fail(ct.PMAgent, "artifact.list", map[string]any{"task_id": "t1"}, "access_denied")
	if !strings.Contains(msg, "no access policy is configured") {
		t.Fatalf("message %q", msg)
	}
	if recs := h.Audit(audit.Filter{}); len(recs) != 1 || recs[0].Decision != "deny" || recs[0].ErrorType != "access_denied" {
		t.Fatalf("audit %+v", recs)
	}
}
