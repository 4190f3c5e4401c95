package db_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/services/cynode/db"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
	"github.com/utpmesh/utpmesh/services/cynode/store"
)

func start(t *testing.T) (*ct.Direct, func(string) gateway.Spec) {
	t.Helper()
	d := ct.NewDirect(t, nil)
	d.Seed()
	specs := db.Specs()
	return d, func(name string) gateway.Spec { return d.Spec(specs, name) }
}

func TestSpecs(t *testing.T) {
	seen := map[string]bool{}
	for _, sp := range db.Specs() {
		if seen[sp.Name] {
			t.Errorf("%s twice", sp.Name)
		}
		seen[sp.Name] = true
		if sp.Scope != gateway.ScopePM || sp.Run == nil || sp.Description == "" {
			t.Errorf("%s: scope %s, run %v, description %q; every db.* tool has scope pm, a handler and a description", sp.Name, sp.Scope, sp.Run != nil, sp.Description)
		}
		var schema map[string]any
		if err := json.Unmarshal([]byte(sp.Params), &schema); err != nil || schema["additionalProperties"] != false {
			t.Errorf("%s: params %s: %v (want a closed object schema)", sp.Name, sp.Params, err)
		}
	}
	if len(seen) != 17 {
		t.Errorf("%d tools; want 17", len(seen))
	}
}

func TestCheckValue(t *testing.T) {
	for _, tc := range []struct {
		value, typ string
		want       any // nil: refused
		says       string
	}{
		{`"x"`, "string", "x", ""},
		{`1.5`, "number", 1.5, ""},
		{`-3`, "integer", float64(-3), ""},
		{`1e3`, "integer", float64(1000), ""},
		{`true`, "boolean", true, ""},
		{`{"a":[1]}`, "json", map[string]any{"a": []any{float64(1)}}, ""},
		{`null`, "json", nil, ""},
		{`1.5`, "integer", nil, "is not of value_type integer"},
		{`9007199254740991`, "integer", float64(9007199254740991), ""},
		{`-9007199254740991`, "integer", float64(-9007199254740991), ""},
		{`9007199254740993`, "integer", nil, "outside the integers a JSON number holds exactly (±9007199254740991); store it as value_type string"},
		{`1e300`, "integer", nil, "outside the integers a JSON number holds exactly"},
		{`"1"`, "number", nil, "is not of value_type number"},
		{`1`, "string", nil, "is not of value_type string"},
		{`"true"`, "boolean", nil, "is not of value_type boolean"},
		{`1`, "decimal", nil, `value_type "decimal" is not one of [string number integer boolean json]`},
		{``, "string", nil, "value is missing"},
		{`{`, "json", nil, "value:"},
	} {
		t.Run(tc.typ+" "+tc.value, func(t *testing.T) {
			got, err := db.CheckValue(json.RawMessage(tc.value), tc.typ)
			if tc.says != "" {
				ge, ok := err.(*gateway.Error)
				if !ok || ge.Type != gateway.TypeInvalidArgument || !contains(ge.Message, tc.says) {
					t.Fatalf("CheckValue(%s, %s) = %v, %v; want invalid_argument saying %q", tc.value, tc.typ, got, err, tc.says)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("CheckValue(%s, %s) = %v, %v; want %v", tc.value, tc.typ, got, err, tc.want)
			}
		})
	}
}

func TestTasksAndJobs(t *testing.T) {
	d, spec := start(t)
	if got := d.OK(spec(db.ToolTaskGet), ct.PMAgent, map[string]any{"task_id": "t1"}); got["title"] != "first" || got["user_id"] != "alice" {
		t.Fatalf("task = %v", got)
	}
	got := d.OK(spec(db.ToolTaskUpdateStatus), ct.PMAgent, map[string]any{"task_id": "t1", "status": "running"})
	if ct.Str(got, "before", "status") != "pending" || ct.Str(got, "after", "status") != "running" || ct.Str(got, "after", "updated_at") != "2026-11-26T12:00:00Z" {
		t.Fatalf("update = %v", got)
	}
	for _, tc := range []struct {
		name, tool string
		args       map[string]any
		typ, says  string
	}{
		{"illegal move", db.ToolTaskUpdateStatus, map[string]any{"task_id": "t1", "status": "pending"}, "invalid_argument", "cannot move from running to pending"},
		{"unknown status", db.ToolTaskUpdateStatus, map[string]any{"task_id": "t1", "status": "done"}, "invalid_argument", `status "done" is not one of`},
		{"status of the wrong type", db.ToolTaskUpdateStatus, map[string]any{"task_id": "t1", "status": 3}, "invalid_argument", "arguments:"},
		{"job of another project", db.ToolJobGet, map[string]any{"job_id": "j-foreign"}, "not_found", "job j-foreign does not exist in project demo"},
		{"missing job", db.ToolJobGet, map[string]any{"job_id": "j9"}, "not_found", "job j9 does not exist in project demo"},
		{"job of another task", db.ToolJobGet, map[string]any{"job_id": "j1", "task_id": "t2"}, "invalid_argument", "job j1 belongs to task t1, not to task_id t2"},
		{"update a job of another project", db.ToolJobUpdateStatus, map[string]any{"job_id": "j-foreign", "status": "running"}, "not_found", "does not exist in project demo"},
		{"illegal job move", db.ToolJobUpdateStatus, map[string]any{"job_id": "j1", "status": "completed"}, "invalid_argument", "legal from pending: running, canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) { d.For(t).Fail(spec(tc.tool), ct.PMAgent, tc.args, tc.typ, tc.says) })
	}
	if got := d.OK(spec(db.ToolJobGet), ct.PMAgent, map[string]any{"job_id": "j1", "task_id": "t1"}); got["task_id"] != "t1" {
		t.Fatalf("job = %v", got)
	}
	if got := d.OK(spec(db.ToolJobUpdateStatus), ct.PMAgent, map[string]any{"job_id": "j1", "status": "canceled"}); ct.Str(got, "after", "status") != "canceled" {
		t.Fatalf("job update = %v", got)
	}
}

func TestPreferenceScopes(t *testing.T) {
	d, spec := start(t)
	create := spec(db.ToolPreferenceCreate)
	pref := func(scopeType, scopeID string) map[string]any {
		a := map[string]any{"scope_type": scopeType, "key": "k", "value": 1, "value_type": "integer"}
		if scopeID != "-" {
			a["scope_id"] = scopeID
		}
		return a
	}
	for _, tc := range []struct {
		name, agent, scopeType, scopeID string
		typ, says                       string // "" succeeds
	}{
		{"system", ct.PMAgent, "system", "-", "", ""},
		{"system with an id", ct.PMAgent, "system", "x", "invalid_argument", "takes no scope_id; leave scope_id out"},
		{"system with an empty id", ct.PMAgent, "system", "", "invalid_argument", "takes no scope_id"},
		{"project without an id", ct.PMAgent, "project", "-", "invalid_argument", "scope_type project needs scope_id (the id of the project)"},
		{"project with an empty id", ct.PMAgent, "project", "", "invalid_argument", "needs scope_id"},
		{"the calling project", ct.PMAgent, "project", ct.Project, "", ""},
		{"a project of the PA agent's registration", ct.PAAgent, "project", "p-shared", "", ""},
		{"a project the PM agent is not registered for", ct.PMAgent, "project", "p-shared", "not_found", "not one the caller is authorized for"},
		{"another project", ct.PAAgent, "project", ct.Other, "not_found", "not one the caller is authorized for"},
		{"a task of the project", ct.PMAgent, "task", "t1", "", ""},
		{"a task of another project", ct.PMAgent, "task", "t-foreign", "not_found", "task t-foreign does not exist in project demo"},
		{"a missing task", ct.PMAgent, "task", "t9", "not_found", "task t9 does not exist"},
		{"the PA agent's own user", ct.PAAgent, "user", "alice", "", ""},
		{"another user, as PA", ct.PAAgent, "user", "bob", "access_denied", `acting for user "alice" may only use its own user's preferences, not "bob"`},
		{"another user, as sandbox", ct.SandboxAgent, "user", "bob", "access_denied", "a sandbox agent"},
		{"any user, as PM", ct.PMAgent, "user", "bob", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.typ != "" {
				d.For(t).Fail(create, tc.agent, pref(tc.scopeType, tc.scopeID), tc.typ, tc.says)
				// The same checks guard every preference tool.
				for _, name := range []string{db.ToolPreferenceGet, db.ToolPreferenceList, db.ToolPreferenceUpdate, db.ToolPreferenceDelete} {
					d.For(t).Fail(spec(name), tc.agent, pref(tc.scopeType, tc.scopeID), tc.typ, tc.says)
				}
				return
			}
			got := d.For(t).OK(create, tc.agent, pref(tc.scopeType, tc.scopeID))
			want := tc.scopeID
			if want == "-" {
				want = ""
			}
			if got["scope_type"] != tc.scopeType || ct.Str(got, "scope_id") != want || got["version"] != float64(1) || got["updated_by"] != tc.agent {
				t.Fatalf("created %v", got)
			}
			if got := d.For(t).OK(spec(db.ToolPreferenceGet), tc.agent, pref(tc.scopeType, tc.scopeID)); got["value"] != float64(1) {
				t.Fatalf("get = %v", got)
			}
		})
	}
}

func TestSettingValues(t *testing.T) {
	d, spec := start(t)
	for _, tc := range []struct {
		name string
		args map[string]any
		typ  string
		says string
	}{
		{"value of another type", map[string]any{"key": "k", "value": "x", "value_type": "integer"}, "invalid_argument", `value "x" is not of value_type integer`},
		{"missing value", map[string]any{"key": "k", "value_type": "integer"}, "invalid_argument", "value is missing"},
		{"unknown value type", map[string]any{"key": "k", "value": 1, "value_type": "int"}, "invalid_argument", `value_type "int" is not one of`},
		{"key of the wrong type", map[string]any{"key": 1, "value": 1, "value_type": "integer"}, "invalid_argument", "arguments:"},
		{"NUL in the key", map[string]any{"key": "a\x00b", "value": 1, "value_type": "integer"}, "invalid_argument", "NUL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.For(t).Fail(spec(db.ToolSettingCreate), ct.PMAgent, tc.args, tc.typ, tc.says)
		})
	}
	if got := d.OK(spec(db.ToolSettingCreate), ct.PMAgent, map[string]any{"key": "k", "value": map[string]any{"a": 1}, "value_type": "json", "reason": "r"}); got["reason"] != "r" || ct.Get(got, "value", "a") != float64(1) || got["scope_type"] != nil {
		t.Fatalf("created %v (a system setting has no scope fields)", got)
	}
	// Update keeps the value type it is given and checks the value.
	d.Fail(spec(db.ToolSettingUpdate), ct.PMAgent, map[string]any{"key": "k", "value": 1.5, "value_type": "integer"}, "invalid_argument", "not of value_type integer")
	if got := d.OK(spec(db.ToolSettingUpdate), ct.PMAgent, map[string]any{"key": "k", "value": 2, "value_type": "integer", "expected_version": 1}); got["version"] != float64(2) || got["value_type"] != "integer" {
		t.Fatalf("updated %v", got)
	}
}

func TestLists(t *testing.T) {
	d, spec := start(t)
	d.Limits.MaxListLimit = 3
	for i := range 4 {
		d.OK(spec(db.ToolSettingCreate), ct.PMAgent, map[string]any{"key": fmt.Sprintf("k%d", i), "value": i, "value_type": "integer"})
	}
	list := spec(db.ToolSettingList)
	// No limit: the default page, bounded by max_list_limit.
	first := d.OK(list, ct.PMAgent, map[string]any{})
	if n := len(first["settings"].([]any)); n != 3 || ct.Str(first, "next_cursor") == "" {
		t.Fatalf("first page %v", first)
	}
	rest := d.OK(list, ct.PMAgent, map[string]any{"cursor": ct.Str(first, "next_cursor")})
	if n := len(rest["settings"].([]any)); n != 1 || ct.Str(rest, "next_cursor") != "" {
		t.Fatalf("last page %v", rest)
	}
	if got := d.OK(list, ct.PMAgent, map[string]any{"key_prefix": "zz"}); got["settings"] == nil || len(got["settings"].([]any)) != 0 {
		t.Fatalf("an empty list is [] (not null): %v", got)
	}
	if got := d.OK(spec(db.ToolPreferenceList), ct.PMAgent, map[string]any{"scope_type": "task", "scope_id": "t1"}); got["preferences"] == nil {
		t.Fatalf("an empty preference list is []: %v", got)
	}
	if got := d.OK(spec(db.ToolProjectList), ct.PMAgent, map[string]any{"q": "nothing like it"}); got["projects"] == nil {
		t.Fatalf("an empty project list is []: %v", got)
	}
	for _, tc := range []struct {
		name, tool string
		args       map[string]any
		says       string
	}{
		{"limit over max_list_limit", db.ToolSettingList, map[string]any{"limit": 4}, "limit 4 is out of range: pass 1..3"},
		{"negative limit", db.ToolPreferenceList, map[string]any{"scope_type": "system", "limit": -1}, "limit -1 is out of range"},
		{"project list limit", db.ToolProjectList, map[string]any{"limit": 1000}, "out of range"},
		{"cursor not from this server", db.ToolSettingList, map[string]any{"cursor": "%%"}, "is not one this server returned"},
		{"cursor of another list", db.ToolPreferenceList, map[string]any{"scope_type": "task", "scope_id": "t1", "cursor": ct.Str(first, "next_cursor")}, "belongs to another list"},
	} {
		t.Run(tc.name, func(t *testing.T) { d.For(t).Fail(spec(tc.tool), ct.PMAgent, tc.args, "invalid_argument", tc.says) })
	}
}

func TestEffective(t *testing.T) {
	d, spec := start(t)
	ctx := t.Context()
	create := func(scopeType, scopeID, key string, v any) {
		a := map[string]any{"scope_type": scopeType, "key": key, "value": v, "value_type": "json"}
		if scopeID != "" {
			a["scope_id"] = scopeID
		}
		d.OK(spec(db.ToolPreferenceCreate), ct.PMAgent, a)
	}
	create("system", "", "a", "system")
	create("system", "", "b", "system")
	create("user", "bob", "b", "bob")
	create("user", "alice", "a", "alice")
	create("task", "t1", "c", "task")
	for _, tc := range []struct {
		name, agent, task string
		user              string // the task's user
		want              map[string]any
	}{
		// t1 is alice's: her level applies whoever asks.
		{"the task's user", ct.PMAgent, "t1", "alice", map[string]any{"a": "alice", "b": "system", "c": "task"}},
		// A task without a user takes the caller's.
		{"the caller's user", ct.PAAgent, "t2", "", map[string]any{"a": "alice", "b": "system"}},
		// A PM agent acts for no user: no user level.
		{"no user", ct.PMAgent, "t3", "", map[string]any{"a": "system", "b": "system"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.task != "t1" {
				if err := d.Store.PutTask(ctx, storeTask(tc.task, tc.user)); err != nil {
					t.Fatal(err)
				}
			}
			got := d.For(t).OK(spec(db.ToolPreferenceEffectiv), tc.agent, map[string]any{"task_id": tc.task})
			if fmt.Sprint(got["effective"]) != fmt.Sprint(tc.want) || got["task_id"] != tc.task || got["sources"] != nil {
				t.Fatalf("effective = %v; want %v", got, tc.want)
			}
		})
	}
	d.Fail(spec(db.ToolPreferenceEffectiv), ct.PMAgent, map[string]any{"task_id": "t9"}, "not_found", `no task "t9"`)
}

func TestProjects(t *testing.T) {
	d, spec := start(t)
	get := spec(db.ToolProjectGet)
	for _, tc := range []struct {
		name, agent string
		args        map[string]any
		slug        string // "" for a failure
		typ, says   string
	}{
		{"by id", ct.PMAgent, map[string]any{"project_id": ct.Project}, "demo", "", ""},
		{"by slug", ct.PAAgent, map[string]any{"slug": "shared"}, "shared", "", ""},
		{"neither", ct.PMAgent, map[string]any{}, "", "invalid_argument", "pass exactly one of project_id or slug (got neither)"},
		{"both", ct.PMAgent, map[string]any{"project_id": ct.Project, "slug": "demo"}, "", "invalid_argument", "(got both)"},
		{"not authorized, by id", ct.PMAgent, map[string]any{"project_id": ct.Other}, "", "not_found", `no project "other" among the projects the caller is authorized for`},
		{"not authorized, by slug", ct.PMAgent, map[string]any{"slug": "shared"}, "", "not_found", `no project "shared"`},
		{"missing", ct.PAAgent, map[string]any{"slug": "nope"}, "", "not_found", `no project "nope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.slug == "" {
				d.For(t).Fail(get, tc.agent, tc.args, tc.typ, tc.says)
				return
			}
			if got := d.For(t).OK(get, tc.agent, tc.args); got["slug"] != tc.slug {
				t.Fatalf("got %v", got)
			}
		})
	}
	list := spec(db.ToolProjectList)
	for _, tc := range []struct {
		agent, q string
		want     []string
	}{
		{ct.PMAgent, "", []string{"demo"}},
		{ct.PAAgent, "", []string{"demo", "shared"}},
		{ct.PAAgent, "TEAM", []string{"shared"}},
		{ct.SandboxAgent, "", []string{"demo"}},
	} {
		got := d.OK(list, tc.agent, map[string]any{"q": tc.q})
		var slugs []string
		for _, p := range got["projects"].([]any) {
			slugs = append(slugs, ct.Str(p, "slug"))
		}
		if fmt.Sprint(slugs) != fmt.Sprint(tc.want) {
			t.Errorf("%s q=%q lists %v; want %v", tc.agent, tc.q, slugs, tc.want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func storeTask(id, user string) store.Task {
	return store.Task{ID: id, ProjectID: ct.Project, UserID: user}
}
