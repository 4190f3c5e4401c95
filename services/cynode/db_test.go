package cynode_test

import (
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/services/cynode/audit"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/subjects"
)

func TestTasksAndJobs(t *testing.T) {
	h := ct.Start(t, nil)
	seed(t, h)
	if got := h.OK(ct.PMAgent, "db.task.get", map[string]any{"task_id": "t1"}); got["status"] != "pending" || got["project_id"] != ct.Project {
		t.Fatalf("task = %v", got)
	}
	up := h.OK(ct.PMAgent, "db.task.update_status", map[string]any{"task_id": "t1", "status": "running"})
	if ct.Str(up, "before", "status") != "pending" || ct.Str(up, "after", "status") != "running" {
		t.Fatalf("update = %v", up)
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
		msg  string
	}{
		{"db.task.update_status", map[string]any{"task_id": "t1", "status": "pending"}, "cannot move from running to pending (legal from running: completed, failed, canceled)"},
		{"db.job.update_status", map[string]any{"job_id": "j1", "status": "completed"}, "cannot move from pending to completed"},
	} {
		if msg := h.Fail(ct.PMAgent, tc.tool, tc.args, "invalid_argument"); !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %q; want %q", tc.tool, msg, tc.msg)
		}
	}
	h.OK(ct.PMAgent, "db.task.update_status", map[string]any{"task_id": "t1", "status": "completed"})
	if msg := h.Fail(ct.PMAgent, "db.task.update_status", map[string]any{"task_id": "t1", "status": "canceled"}, "invalid_argument"); !strings.Contains(msg, "terminal") {
		t.Errorf("terminal: %q", msg)
	}
	if got := h.OK(ct.PMAgent, "db.job.get", map[string]any{"job_id": "j1"}); got["task_id"] != "t1" {
		t.Fatalf("job = %v", got)
	}
	if got := h.OK(ct.PMAgent, "db.job.update_status", map[string]any{"job_id": "j1", "status": "running"}); ct.Str(got, "after", "status") != "running" {
		t.Fatalf("job update = %v", got)
	}
	h.Fail(ct.PMAgent, "db.job.update_status", map[string]any{"job_id": "j-foreign", "status": "running"}, "not_found")
}

// TestSystemSettings: an operator writes system settings (the tools are
// operator-only: system settings guard agents' permissions); agents read
// them.
func TestSystemSettings(t *testing.T) {
	h := ct.Start(t, nil)
	const op = "alice"
	key := "agents.project_manager.sandbox.allow_add_to_allowed_images"
	created := h.OperatorOK(op, "db.system_setting.create", map[string]any{"key": key, "value": false, "value_type": "boolean", "reason": "default"})
	if created["version"] != float64(1) || created["value"] != false || created["updated_by"] != "operator:"+op {
		t.Fatalf("create = %v", created)
	}
	if msg := h.OperatorFail(op, "db.system_setting.create", map[string]any{"key": key, "value": true, "value_type": "boolean"}, "already_exists"); !strings.Contains(msg, "use update") {
		t.Errorf("create twice: %q", msg)
	}
	if msg := h.OperatorFail(op, "db.system_setting.update", map[string]any{"key": key, "value": true, "value_type": "boolean", "expected_version": 7}, "conflict"); !strings.Contains(msg, "at version 1") {
		t.Errorf("conflict: %q", msg)
	}
	if got := h.OperatorOK(op, "db.system_setting.update", map[string]any{"key": key, "value": true, "value_type": "boolean", "expected_version": 1}); got["version"] != float64(2) || got["value"] != true {
		t.Fatalf("update = %v", got)
	}
	if got := h.OperatorOK(op, "db.system_setting.update", map[string]any{"key": key, "value": false, "value_type": "boolean"}); got["version"] != float64(3) {
		t.Fatalf("update without expected_version = %v", got)
	}
	h.OperatorFail(op, "db.system_setting.update", map[string]any{"key": key, "value": "yes", "value_type": "boolean"}, "invalid_argument")
	h.OperatorFail(op, "db.system_setting.update", map[string]any{"key": "nope", "value": 1, "value_type": "integer"}, "not_found")
	for _, k := range []string{"ui.theme", "ui.lang", "ui.font"} {
		h.OperatorOK(op, "db.system_setting.create", map[string]any{"key": k, "value": "x", "value_type": "string"})
	}
	page := h.OK(ct.PMAgent, "db.system_setting.list", map[string]any{"key_prefix": "ui.", "limit": 2})
	next := ct.Str(page, "next_cursor")
	rest := h.OK(ct.PMAgent, "db.system_setting.list", map[string]any{"key_prefix": "ui.", "limit": 2, "cursor": next})
	if len(page["settings"].([]any)) != 2 || next == "" || len(rest["settings"].([]any)) != 1 || ct.Str(rest, "next_cursor") != "" {
		t.Fatalf("pages %v / %v", page, rest)
	}
	h.OperatorFail(op, "db.system_setting.delete", map[string]any{"key": key, "expected_version": 1}, "conflict")
	if got := h.OperatorOK(op, "db.system_setting.delete", map[string]any{"key": key, "expected_version": 3}); ct.Str(got, "deleted", "key") != key {
		t.Fatalf("delete = %v", got)
	}
	h.Fail(ct.PMAgent, "db.system_setting.get", map[string]any{"key": key}, "not_found")
	// An operator calls only the operator tools.
	if msg := h.OperatorFail(op, "db.task.get", map[string]any{"task_id": "t1"}, "not_allowed"); !strings.Contains(msg, "agent's tool") {
		t.Errorf("operator on an agent tool: %q", msg)
	}
	// The audit names the operator, not an agent.
	found := false
	for _, r := range h.Audit(audit.Filter{}) {
		if r.Tool == "db.system_setting.create" && r.Decision == audit.DecisionAllow {
			found = true
			if r.Subject != "operator:"+op || r.AgentType != "operator" {
				t.Errorf("audit record of an operator's write: subject %q, agent_type %q", r.Subject, r.AgentType)
			}
		}
	}
	if !found {
		t.Error("no audit record of the operator's writes")
	}
}

// TestAgentCannotWidenItsOwnPermissions is issue 23's case: a PM agent
// switched on agents.project_manager.sandbox.allow_add_to_allowed_images
// with db.system_setting.create and then added an image. Every way an
// agent writes that switch (or an allowed image) is refused, whatever
// its type, and the image stays out.
func TestAgentCannotWidenItsOwnPermissions(t *testing.T) {
	h := ct.Start(t, nil)
	seed(t, h)
	const key = "agents.project_manager.sandbox.allow_add_to_allowed_images"
	// The mesh audits its admission's refusals as authz decisions.
	decisions, err := h.Mesh.Conn().SubscribeSync("cg." + subjects.DefaultVersion + "." + ct.Project + ".*.evt.sys.authz.decision")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = decisions.Unsubscribe() }()
	for _, tc := range []struct {
		name, agent, tool string
		args              map[string]any
		typ, msg          string
	}{
		{"PM creates the switch", ct.PMAgent, "db.system_setting.create", map[string]any{"key": key, "value": true, "value_type": "boolean"}, "operator_only", "operator only"},
		{"PM updates the switch", ct.PMAgent, "db.system_setting.update", map[string]any{"key": key, "value": true, "value_type": "boolean"}, "operator_only", "operator only"},
		{"PM deletes a setting", ct.PMAgent, "db.system_setting.delete", map[string]any{"key": key}, "operator_only", "operator only"},
		{"PM adds an image as a setting", ct.PMAgent, "db.system_setting.create", map[string]any{"key": "sandbox.allowed_images/evil:1", "value": map[string]any{}, "value_type": "json"}, "operator_only", "operator only"},
		{"PA creates the switch", ct.PAAgent, "db.system_setting.create", map[string]any{"key": key, "value": true, "value_type": "boolean"}, "operator_only", "operator only"},
		{"PM writes the switch as a system preference", ct.PMAgent, "db.preference.create", map[string]any{"scope_type": "system", "key": key, "value": true, "value_type": "boolean"}, "access_denied", "guards agents' permissions"},
		{"PM updates it as a system preference", ct.PMAgent, "db.preference.update", map[string]any{"scope_type": "system", "key": key, "value": true, "value_type": "boolean"}, "access_denied", "guards agents' permissions"},
		{"PM adds an image as a system preference", ct.PMAgent, "db.preference.create", map[string]any{"scope_type": "system", "key": "sandbox.allowed_images/evil:1", "value": map[string]any{}, "value_type": "json"}, "access_denied", "guards agents' permissions"},
		{"PM deletes it as a system preference", ct.PMAgent, "db.preference.delete", map[string]any{"scope_type": "system", "key": key}, "access_denied", "guards agents' permissions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.typ == "operator_only" { // refused by the mesh's admission: the tool never runs
				if msg := h.RefusedOperatorOnly(tc.agent, tc.tool, tc.args); !strings.Contains(msg, tc.msg) {
					t.Fatalf("%q; want it to say %q", msg, tc.msg)
				}
				return
			}
			if msg := h.Fail(tc.agent, tc.tool, tc.args, tc.typ); !strings.Contains(msg, tc.msg) {
				t.Fatalf("%q; want it to say %q", msg, tc.msg)
			}
		})
	}
	add := map[string]any{"image_ref": "docker.io/library/python:3.12", "name": "python", "task_id": "t1"}
	h.Fail(ct.PMAgent, "sandbox.allowed_images.add", add, "access_denied")
	h.Fail(ct.PMAgent, "db.system_setting.get", map[string]any{"key": key}, "not_found")
	// The same keys at other scopes are ordinary preferences.
	h.OK(ct.PMAgent, "db.preference.create", map[string]any{"scope_type": "project", "scope_id": ct.Project, "key": key, "value": true, "value_type": "boolean"})
	h.Fail(ct.PMAgent, "sandbox.allowed_images.add", add, "access_denied")
	// The operator-only tools' refusals are audited as denials by the
	// mesh's admission (authz decision records).
	denied := 0
	for denied < 2 {
		msg, err := decisions.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("%d denied db.system_setting.create decisions of %s, want 2: %v", denied, ct.PMAgent, err)
		}
		recs, _ := authz.ParseAuditRecords(msg.Data)
		for _, r := range recs {
			if r.ToolName == "db.system_setting.create" && r.AgentID == ct.PMAgent &&
				r.Decision == authz.DecisionDeny && r.Reason == authz.ReasonOperatorOnly {
				denied++
			}
		}
	}
}

func TestPreferences(t *testing.T) {
	h := ct.Start(t, nil)
	seed(t, h)
	pref := func(scopeType, scopeID, key string, v any) {
		args := map[string]any{"scope_type": scopeType, "key": key, "value": v, "value_type": "json"}
		if scopeID != "" {
			args["scope_id"] = scopeID
		}
		h.OK(ct.PMAgent, "db.preference.create", args)
	}
	pref("system", "", "model", "small")
	pref("system", "", "temperature", 0.2)
	pref("system", "", "style", "terse")
	pref("project", ct.Project, "model", "medium")
	pref("user", "alice", "style", "verbose")
	pref("task", "t1", "temperature", 0.9)
	pref("user", "bob", "model", "huge") // another user: not part of t1's resolution

	for _, tc := range []struct {
		args map[string]any
		typ  string
		msg  string
	}{
		{map[string]any{"scope_type": "project", "key": "k", "value": 1, "value_type": "integer"}, "invalid_argument", "needs scope_id"},
		{map[string]any{"scope_type": "system", "scope_id": "x", "key": "k", "value": 1, "value_type": "integer"}, "invalid_argument", "takes no scope_id"},
		{map[string]any{"scope_type": "project", "scope_id": ct.Project, "key": "model", "value": "x", "value_type": "string"}, "already_exists", "exists"},
		{map[string]any{"scope_type": "task", "scope_id": "t-foreign", "key": "k", "value": 1, "value_type": "integer"}, "not_found", "does not exist in project demo"},
		{map[string]any{"scope_type": "project", "scope_id": ct.Other, "key": "k", "value": 1, "value_type": "integer"}, "not_found", "not one the caller is authorized for"},
	} {
		if msg := h.Fail(ct.PMAgent, "db.preference.create", tc.args, tc.typ); !strings.Contains(msg, tc.msg) {
			t.Errorf("%v: %q; want %q", tc.args, msg, tc.msg)
		}
	}
	// A PA agent acting for alice may not read bob's preferences.
	h.Fail(ct.PAAgent, "db.preference.get", map[string]any{"scope_type": "user", "scope_id": "bob", "key": "model"}, "access_denied")
	if got := h.OK(ct.PAAgent, "db.preference.get", map[string]any{"scope_type": "user", "scope_id": "alice", "key": "style"}); got["value"] != "verbose" {
		t.Fatalf("get = %v", got)
	}
	h.Fail(ct.PMAgent, "db.preference.update", map[string]any{"scope_type": "task", "scope_id": "t1", "key": "temperature", "value": 0.5, "value_type": "number", "expected_version": 2}, "conflict")
	h.OK(ct.PMAgent, "db.preference.update", map[string]any{"scope_type": "task", "scope_id": "t1", "key": "temperature", "value": 0.7, "value_type": "number", "expected_version": 1})

	eff := h.OK(ct.PAAgent, "db.preference.effective", map[string]any{"task_id": "t1", "include_sources": true})
	if ct.Get(eff, "effective", "model") != "medium" || ct.Get(eff, "effective", "style") != "verbose" || ct.Get(eff, "effective", "temperature") != 0.7 {
		t.Fatalf("effective = %v", eff)
	}
	if ct.Str(eff, "sources", "model", "scope_type") != "project" || ct.Str(eff, "sources", "style", "scope_id") != "alice" ||
		ct.Str(eff, "sources", "temperature", "scope_type") != "task" || ct.Get(eff, "sources", "temperature", "version") != float64(2) {
		t.Fatalf("sources = %v", eff["sources"])
	}
	if plain := h.OK(ct.PMAgent, "db.preference.effective", map[string]any{"task_id": "t1"}); plain["sources"] != nil {
		t.Fatalf("sources without include_sources: %v", plain)
	}
	if got := h.OK(ct.PMAgent, "db.preference.list", map[string]any{"scope_type": "system"}); len(got["preferences"].([]any)) != 3 {
		t.Fatalf("list = %v", got)
	}
	h.OK(ct.PMAgent, "db.preference.delete", map[string]any{"scope_type": "user", "scope_id": "alice", "key": "style"})
	if eff := h.OK(ct.PMAgent, "db.preference.effective", map[string]any{"task_id": "t1"}); ct.Get(eff, "effective", "style") != "terse" {
		t.Fatalf("after delete = %v", eff)
	}
}

func TestProjects(t *testing.T) {
	h := ct.Start(t, nil)
	seed(t, h)
	for _, tc := range []struct {
		agent string
		args  map[string]any
		want  string // slug, or "" for an error type in typ
		typ   string
	}{
		{ct.PMAgent, map[string]any{"project_id": ct.Project}, "demo", ""},
		{ct.PMAgent, map[string]any{"slug": "demo"}, "demo", ""},
		{ct.PAAgent, map[string]any{"slug": "shared"}, "shared", ""},
		{ct.PMAgent, map[string]any{"slug": "shared"}, "", "not_found"}, // not in the PM agent's set
		{ct.PMAgent, map[string]any{"project_id": ct.Other}, "", "not_found"},
		{ct.PMAgent, map[string]any{}, "", "invalid_argument"},
		{ct.PMAgent, map[string]any{"project_id": ct.Project, "slug": "demo"}, "", "invalid_argument"},
	} {
		if tc.want != "" {
			if got := h.OK(tc.agent, "db.project.get", tc.args); got["slug"] != tc.want {
				t.Errorf("%s %v = %v", tc.agent, tc.args, got)
			}
			continue
		}
		msg := h.Fail(tc.agent, "db.project.get", tc.args, tc.typ)
		if tc.typ == "invalid_argument" && !strings.Contains(msg, "exactly one of project_id or slug") {
			t.Errorf("%v: %q", tc.args, msg)
		}
	}
	list := h.OK(ct.PAAgent, "db.project.list", map[string]any{})
	if n := len(list["projects"].([]any)); n != 2 {
		t.Fatalf("PA sees %d projects: %v", n, list)
	}
	q := h.OK(ct.PAAgent, "db.project.list", map[string]any{"q": "ALICE"})
	if ps := q["projects"].([]any); len(ps) != 1 || ct.Str(ps[0], "slug") != "shared" {
		t.Fatalf("q = %v", q)
	}
	p1 := h.OK(ct.PAAgent, "db.project.list", map[string]any{"limit": 1})
	p2 := h.OK(ct.PAAgent, "db.project.list", map[string]any{"limit": 1, "cursor": ct.Str(p1, "next_cursor")})
	if ct.Str(p1, "projects", 0, "slug") == ct.Str(p2, "projects", 0, "slug") || ct.Str(p2, "next_cursor") != "" {
		t.Fatalf("pages %v / %v", p1, p2)
	}
}
