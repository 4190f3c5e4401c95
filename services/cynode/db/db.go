// Package db is the CyNodeAI typed database tools: typed operations only,
// never query text. Tasks and jobs are read plus a narrow status update
// (the seed's intentional MVP exception; legal transitions in
// store.Transitions); system settings and preferences are full CRUD with
// versions (create fails on an existing key, expected_version mismatches
// fail with conflict); db.preference.effective resolves system → project →
// user → task; projects are read-only and only those the caller is
// authorized for are visible. Every db.* tool has scope pm.
package db

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
	"github.com/utpmesh/utpmesh/services/cynode/store"
)

// Tool names.
const (
	ToolTaskGet            = "db.task.get"
	ToolTaskUpdateStatus   = "db.task.update_status"
	ToolJobGet             = "db.job.get"
	ToolJobUpdateStatus    = "db.job.update_status"
	ToolSettingGet         = "db.system_setting.get"
	ToolSettingList        = "db.system_setting.list"
	ToolSettingCreate      = "db.system_setting.create"
	ToolSettingUpdate      = "db.system_setting.update"
	ToolSettingDelete      = "db.system_setting.delete"
	ToolPreferenceGet      = "db.preference.get"
	ToolPreferenceList     = "db.preference.list"
	ToolPreferenceCreate   = "db.preference.create"
	ToolPreferenceUpdate   = "db.preference.update"
	ToolPreferenceDelete   = "db.preference.delete"
	ToolPreferenceEffectiv = "db.preference.effective"
	ToolProjectGet         = "db.project.get"
	ToolProjectList        = "db.project.list"
)

// ValueTypes are the accepted value_type values.
var ValueTypes = []string{"string", "number", "integer", "boolean", "json"}

const (
	id        = gateway.IDSchema
	keySchema = `{"type":"string","minLength":1,"maxLength":256}`
	valueType = `{"type":"string","enum":["string","number","integer","boolean","json"]}`
	scopeType = `{"type":"string","enum":["system","project","user","task"]}`
	statusS   = `{"type":"string","enum":["pending","running","completed","failed","canceled"]}`
	reason    = `"reason":{"type":"string","maxLength":1024}`
	expected  = `"expected_version":{"type":"integer","minimum":1}`
)

func obj(required []string, props string) string {
	req, _ := json.Marshal(required)
	if required == nil {
		req = []byte("[]")
	}
	return `{"type":"object","additionalProperties":false,"required":` + string(req) + `,"properties":{` + props + `}}`
}

// Specs are the db.* tools.
func Specs() []gateway.Spec {
	ctxp := gateway.ContextSchema
	pm := gateway.ScopePM
	return []gateway.Spec{
		{Name: ToolTaskGet, Description: "Returns a task of the caller's project.", Scope: pm, TaskScoped: true,
			Params: obj([]string{"task_id"}, `"task_id":`+id+`,`+ctxp), Run: taskGet},
		{Name: ToolTaskUpdateStatus, Description: "Moves a task to a status (legal transitions only); returns before and after.", Scope: pm, TaskScoped: true,
			Params: obj([]string{"task_id", "status"}, `"task_id":`+id+`,"status":`+statusS+`,`+ctxp), Run: taskUpdate},
		{Name: ToolJobGet, Description: "Returns a job of a task of the caller's project.", Scope: pm,
			Params: obj([]string{"job_id"}, `"job_id":`+id+`,"task_id":`+id+`,"run_id":`+id), Run: jobGet},
		{Name: ToolJobUpdateStatus, Description: "Moves a job to a status (legal transitions only); returns before and after.", Scope: pm,
			Params: obj([]string{"job_id", "status"}, `"job_id":`+id+`,"status":`+statusS+`,"task_id":`+id+`,"run_id":`+id), Run: jobUpdate},

		{Name: ToolSettingGet, Description: "Returns a system setting.", Scope: pm,
			Params: obj([]string{"key"}, `"key":`+keySchema), Run: settingGet(false)},
		{Name: ToolSettingList, Description: "Lists system settings by key, paginated (limit, cursor → next_cursor).", Scope: pm,
			Params: obj(nil, `"key_prefix":`+keySchema+`,`+gateway.PageSchema), Run: settingList(false)},
		{Name: ToolSettingCreate, Description: "Operators: creates a system setting; fails if the key exists.", Scope: pm, Operator: true,
			Params: obj([]string{"key", "value", "value_type"}, `"key":`+keySchema+`,"value":{},"value_type":`+valueType+`,`+reason), Run: settingCreate(false)},
		{Name: ToolSettingUpdate, Description: "Operators: updates a system setting; with expected_version, fails with conflict unless it matches.", Scope: pm, Operator: true,
			Params: obj([]string{"key", "value", "value_type"}, `"key":`+keySchema+`,"value":{},"value_type":`+valueType+`,`+expected+`,`+reason), Run: settingUpdate(false)},
		{Name: ToolSettingDelete, Description: "Operators: deletes a system setting; with expected_version, fails with conflict unless it matches.", Scope: pm, Operator: true,
			Params: obj([]string{"key"}, `"key":`+keySchema+`,`+expected+`,`+reason), Run: settingDelete(false)},

		{Name: ToolPreferenceGet, Description: "Returns a preference of a scope (scope_id required unless scope_type is system).", Scope: pm,
			Params: obj([]string{"scope_type", "key"}, `"scope_type":`+scopeType+`,"scope_id":`+id+`,"key":`+keySchema), Run: settingGet(true)},
		{Name: ToolPreferenceList, Description: "Lists the preferences of a scope, paginated.", Scope: pm,
			Params: obj([]string{"scope_type"}, `"scope_type":`+scopeType+`,"scope_id":`+id+`,"key_prefix":`+keySchema+`,`+gateway.PageSchema), Run: settingList(true)},
		{Name: ToolPreferenceCreate, Description: "Creates a preference; fails if the scoped key exists.", Scope: pm,
			Params: obj([]string{"scope_type", "key", "value", "value_type"}, `"scope_type":`+scopeType+`,"scope_id":`+id+`,"key":`+keySchema+`,"value":{},"value_type":`+valueType+`,`+reason), Run: settingCreate(true)},
		{Name: ToolPreferenceUpdate, Description: "Updates a preference; with expected_version, fails with conflict unless it matches.", Scope: pm,
			Params: obj([]string{"scope_type", "key", "value", "value_type"}, `"scope_type":`+scopeType+`,"scope_id":`+id+`,"key":`+keySchema+`,"value":{},"value_type":`+valueType+`,`+expected+`,`+reason), Run: settingUpdate(true)},
		{Name: ToolPreferenceDelete, Description: "Deletes a preference; with expected_version, fails with conflict unless it matches.", Scope: pm,
			Params: obj([]string{"scope_type", "key"}, `"scope_type":`+scopeType+`,"scope_id":`+id+`,"key":`+keySchema+`,`+expected+`,`+reason), Run: settingDelete(true)},
		{Name: ToolPreferenceEffectiv, Description: "Resolves the effective preferences of a task: system, then project, then user, then task (later wins); include_sources names where each came from.", Scope: pm, TaskScoped: true,
			Params: obj([]string{"task_id"}, `"task_id":`+id+`,"include_sources":{"type":"boolean"},`+ctxp), Run: effective},

		{Name: ToolProjectGet, Description: "Returns a project the caller is authorized for, by exactly one of project_id or slug.", Scope: pm,
			Params: obj(nil, `"project_id":`+id+`,"slug":`+keySchema), Run: projectGet},
		{Name: ToolProjectList, Description: "Lists the projects the caller is authorized for, filtered by q (slug, display_name, description), paginated.", Scope: pm,
			Params: obj(nil, `"q":{"type":"string","maxLength":256},`+gateway.PageSchema), Run: projectList},
	}
}

func taskGet(ctx context.Context, x *gateway.Exec) (any, error) {
	return x.Store.GetTask(ctx, x.TaskID)
}

func taskUpdate(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		Status string `json:"status"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	before, after, err := x.Store.UpdateTaskStatus(ctx, x.TaskID, a.Status, x.Now)
	if err != nil {
		return nil, err
	}
	return map[string]any{"before": before, "after": after}, nil
}

// job reads a job and checks that its task is in the caller's project
// (otherwise it is answered as not found).
func job(ctx context.Context, x *gateway.Exec) (store.Job, error) {
	var a struct {
		JobID string `json:"job_id"`
	}
	if err := x.Bind(&a); err != nil {
		return store.Job{}, err
	}
	notFound := gateway.Errorf(gateway.TypeNotFound, "job %s does not exist in project %s", a.JobID, x.Project)
	j, err := x.Store.GetJob(ctx, a.JobID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Job{}, notFound
	}
	if err != nil {
		return store.Job{}, err
	}
	t, err := x.Store.GetTask(ctx, j.TaskID)
	if err != nil || t.ProjectID != x.Project {
		return store.Job{}, notFound
	}
	if x.TaskID != "" && x.TaskID != j.TaskID {
		return store.Job{}, gateway.Errorf(gateway.TypeInvalidArgument, "job %s belongs to task %s, not to task_id %s", a.JobID, j.TaskID, x.TaskID)
	}
	return j, nil
}

func jobGet(ctx context.Context, x *gateway.Exec) (any, error) { return job(ctx, x) }

func jobUpdate(ctx context.Context, x *gateway.Exec) (any, error) {
	j, err := job(ctx, x)
	if err != nil {
		return nil, err
	}
	var a struct {
		Status string `json:"status"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	before, after, err := x.Store.UpdateJobStatus(ctx, j.ID, a.Status, x.Now)
	if err != nil {
		return nil, err
	}
	return map[string]any{"before": before, "after": after}, nil
}

// settingArgs are the arguments of the setting and preference tools.
type settingArgs struct {
	ScopeType       string          `json:"scope_type"`
	ScopeID         *string         `json:"scope_id"`
	Key             string          `json:"key"`
	KeyPrefix       string          `json:"key_prefix"`
	Value           json.RawMessage `json:"value"`
	ValueType       string          `json:"value_type"`
	ExpectedVersion *int64          `json:"expected_version"`
	Reason          string          `json:"reason"`
	Limit           int             `json:"limit"`
	Cursor          string          `json:"cursor"`
}

// scope resolves and checks the scope of a call: system settings use the
// system scope; preferences need scope_id unless scope_type is system, and
// the scope must be visible to the caller (a project it is authorized for,
// a task of its project, its own user unless it is a PM agent).
func scope(ctx context.Context, x *gateway.Exec, pref bool, a *settingArgs) (store.Scope, error) {
	if !pref {
		return store.SystemScope, nil
	}
	sc := store.Scope{Type: a.ScopeType}
	if a.ScopeType == "system" {
		if a.ScopeID != nil {
			return sc, gateway.Errorf(gateway.TypeInvalidArgument, "scope_type system takes no scope_id; leave scope_id out")
		}
		return sc, nil
	}
	if a.ScopeID == nil || *a.ScopeID == "" {
		return sc, gateway.Errorf(gateway.TypeInvalidArgument, "scope_type %s needs scope_id (the id of the %s)", a.ScopeType, a.ScopeType)
	}
	sc.ID = *a.ScopeID
	switch a.ScopeType {
	case "project":
		if !slices.Contains(authorizedProjects(x), sc.ID) {
			return sc, gateway.Errorf(gateway.TypeNotFound, "project %s is not one the caller is authorized for", sc.ID)
		}
	case "task":
		t, err := x.Store.GetTask(ctx, sc.ID)
		if err != nil || t.ProjectID != x.Project {
			return sc, gateway.Errorf(gateway.TypeNotFound, "task %s does not exist in project %s", sc.ID, x.Project)
		}
	case "user":
		if x.Identity.Type != gateway.PM && sc.ID != x.Identity.User {
			return sc, gateway.Errorf(gateway.TypeAccessDenied, "a %s agent acting for user %q may only use its own user's preferences, not %q", x.Identity.Type, x.Identity.User, sc.ID)
		}
	}
	return sc, nil
}

func bindSetting(ctx context.Context, x *gateway.Exec, pref bool) (settingArgs, store.Scope, error) {
	var a settingArgs
	if err := x.Bind(&a); err != nil {
		return a, store.Scope{}, err
	}
	sc, err := scope(ctx, x, pref, &a)
	return a, sc, err
}

// checkGuarded refuses an agent's write of a system-scope key that guards
// agents' permissions (gateway.GuardsPermissions): the system settings
// tools are operator-only, and db.preference.* writes the same store at
// scope_type system.
func checkGuarded(x *gateway.Exec, sc store.Scope, key string) error {
	if x.Identity.Operator != "" || sc.Type != store.SystemScope.Type || !gateway.GuardsPermissions(key) {
		return nil
	}
	return gateway.Errorf(gateway.TypeAccessDenied, "system key %s guards agents' permissions (%s*, %s*): only an operator writes it, with db.system_setting.create|update|delete; agent %s may not",
		key, gateway.AgentSettingsPrefix, gateway.AllowedImagePrefix, x.Identity.AgentID).With(map[string]any{"key": key, "required_principal": "operator"})
}

// maxExactInt is the largest integer every JSON number decoder holds
// exactly (2^53-1).
const maxExactInt = 1<<53 - 1

// CheckValue checks that value has value_type; an integer must lie within
// ±(2^53-1).
func CheckValue(value json.RawMessage, valueType string) (any, error) {
	var v any
	if len(value) == 0 {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "value is missing")
	}
	if err := json.Unmarshal(value, &v); err != nil {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "value: %v", err)
	}
	ok := true
	switch valueType {
	case "string":
		_, ok = v.(string)
	case "number":
		_, ok = v.(float64)
	case "integer":
		f, isNum := v.(float64)
		ok = isNum && f == math.Trunc(f)
		if ok && math.Abs(f) > maxExactInt {
			// A larger integer was rounded when it was decoded: storing it
			// would change it silently.
			return nil, gateway.Errorf(gateway.TypeInvalidArgument, "value %s is outside the integers a JSON number holds exactly (±%d); store it as value_type string", value, int64(maxExactInt))
		}
	case "boolean":
		_, ok = v.(bool)
	case "json":
	default:
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "value_type %q is not one of %v", valueType, ValueTypes)
	}
	if !ok {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "value %s is not of value_type %s", value, valueType)
	}
	return v, nil
}

func settingGet(pref bool) func(context.Context, *gateway.Exec) (any, error) {
	return func(ctx context.Context, x *gateway.Exec) (any, error) {
		a, sc, err := bindSetting(ctx, x, pref)
		if err != nil {
			return nil, err
		}
		return x.Store.GetSetting(ctx, sc, a.Key)
	}
}

func settingList(pref bool) func(context.Context, *gateway.Exec) (any, error) {
	return func(ctx context.Context, x *gateway.Exec) (any, error) {
		a, sc, err := bindSetting(ctx, x, pref)
		if err != nil {
			return nil, err
		}
		page, err := x.Page(a.Limit, a.Cursor)
		if err != nil {
			return nil, err
		}
		items, next, err := x.Store.ListSettings(ctx, sc, a.KeyPrefix, page)
		if err != nil {
			return nil, err
		}
		if items == nil {
			items = []store.Setting{}
		}
		name := "settings"
		if pref {
			name = "preferences"
		}
		return map[string]any{name: items, "next_cursor": next}, nil
	}
}

func write(x *gateway.Exec, a settingArgs) store.Write {
	return store.Write{ExpectedVersion: a.ExpectedVersion, Reason: a.Reason, By: x.Identity.Who(), At: x.Now}
}

func newSetting(x *gateway.Exec, sc store.Scope, pref bool, a settingArgs) (store.Setting, error) {
	v, err := CheckValue(a.Value, a.ValueType)
	if err != nil {
		return store.Setting{}, err
	}
	s := store.Setting{Key: a.Key, Value: v, ValueType: a.ValueType}
	if pref {
		s.ScopeType, s.ScopeID = sc.Type, sc.ID
	}
	return s, nil
}

// settingPut is create or update of a setting or preference: put is
// store.Store's CreateSetting or UpdateSetting.
func settingPut(pref bool, put func(store.Store, context.Context, store.Scope, store.Setting, store.Write) (store.Setting, error)) func(context.Context, *gateway.Exec) (any, error) {
	return func(ctx context.Context, x *gateway.Exec) (any, error) {
		a, sc, err := bindSetting(ctx, x, pref)
		if err != nil {
			return nil, err
		}
		if err := checkGuarded(x, sc, a.Key); err != nil {
			return nil, err
		}
		s, err := newSetting(x, sc, pref, a)
		if err != nil {
			return nil, err
		}
		return put(x.Store, ctx, sc, s, write(x, a))
	}
}

func settingCreate(pref bool) func(context.Context, *gateway.Exec) (any, error) {
	return settingPut(pref, store.Store.CreateSetting)
}

func settingUpdate(pref bool) func(context.Context, *gateway.Exec) (any, error) {
	return settingPut(pref, store.Store.UpdateSetting)
}

func settingDelete(pref bool) func(context.Context, *gateway.Exec) (any, error) {
	return func(ctx context.Context, x *gateway.Exec) (any, error) {
		a, sc, err := bindSetting(ctx, x, pref)
		if err != nil {
			return nil, err
		}
		if err := checkGuarded(x, sc, a.Key); err != nil {
			return nil, err
		}
		old, err := x.Store.DeleteSetting(ctx, sc, a.Key, write(x, a))
		if err != nil {
			return nil, err
		}
		return map[string]any{"deleted": old}, nil
	}
}

// Source says where an effective preference came from.
type Source struct {
	ScopeType string `json:"scope_type"`
	ScopeID   string `json:"scope_id,omitempty"`
	Version   int64  `json:"version"`
}

// effective resolves a task's preferences: system, project (the task's),
// user (the task's user, else the caller's), task; a later level
// overrides an earlier one key by key.
func effective(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		IncludeSources bool `json:"include_sources"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	t, err := x.Store.GetTask(ctx, x.TaskID)
	if err != nil {
		return nil, err
	}
	user := t.UserID
	if user == "" {
		user = x.Identity.User
	}
	levels := []store.Scope{store.SystemScope, {Type: "project", ID: t.ProjectID}}
	if user != "" {
		levels = append(levels, store.Scope{Type: "user", ID: user})
	}
	levels = append(levels, store.Scope{Type: "task", ID: t.ID})
	values := map[string]any{}
	sources := map[string]Source{}
	for _, sc := range levels {
		page := store.Page{Limit: 1000}
		for {
			items, next, err := x.Store.ListSettings(ctx, sc, "", page)
			if err != nil {
				return nil, err
			}
			for _, s := range items {
				values[s.Key] = s.Value
				sources[s.Key] = Source{ScopeType: sc.Type, ScopeID: sc.ID, Version: s.Version}
			}
			if next == "" {
				break
			}
			page.Cursor = next
		}
	}
	out := map[string]any{"task_id": t.ID, "effective": values}
	if a.IncludeSources {
		out["sources"] = sources
	}
	return out, nil
}

// authorizedProjects are the projects the caller may see: the calling
// project and the agent registration's projects.
func authorizedProjects(x *gateway.Exec) []string {
	out := []string{x.Project}
	for _, p := range x.Identity.Projects {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func projectGet(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		ProjectID string `json:"project_id"`
		Slug      string `json:"slug"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	if (a.ProjectID == "") == (a.Slug == "") {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "pass exactly one of project_id or slug (got %s)", map[bool]string{true: "both", false: "neither"}[a.ProjectID != ""])
	}
	var p store.Project
	var err error
	if a.ProjectID != "" {
		p, err = x.Store.GetProject(ctx, a.ProjectID)
	} else {
		p, err = x.Store.GetProjectBySlug(ctx, a.Slug)
	}
	name := a.ProjectID + a.Slug
	if err != nil || !slices.Contains(authorizedProjects(x), p.ID) {
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		return nil, gateway.Errorf(gateway.TypeNotFound, "no project %s among the projects the caller is authorized for (db.project.list shows them)", fmt.Sprintf("%q", name))
	}
	return p, nil
}

func projectList(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		Q      string `json:"q"`
		Limit  int    `json:"limit"`
		Cursor string `json:"cursor"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	page, err := x.Page(a.Limit, a.Cursor)
	if err != nil {
		return nil, err
	}
	ps, next, err := x.Store.ListProjects(ctx, authorizedProjects(x), a.Q, page)
	if err != nil {
		return nil, err
	}
	if ps == nil {
		ps = []store.Project{}
	}
	return map[string]any{"projects": ps, "next_cursor": next}, nil
}
