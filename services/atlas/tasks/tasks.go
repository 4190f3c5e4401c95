// Package tasks is the atlas.tasks service: TASK_CREATE, TASK_LIST,
// TASK_UPDATE and TASK_DELETE over tasks kept in the group's state
// (<DataDir>/atlas-tasks.db, or the shared KV bucket atlas_tasks).
//
// Ids are task_<16 hex> derived from the project and the creating call's
// tool_call_id; created_at and updated_at are the call's time. Undo steps:
// TASK_CREATE → TASK_DELETE; TASK_UPDATE → TASK_UPDATE with the previous
// values of the updated fields; TASK_DELETE → TASK_CREATE with the deleted
// task's fields (the re-created task gets a new id). All tools are LOW risk
// and need no confirmation.
package tasks

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"

	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/internal/atime"
	"github.com/utpmesh/utpmesh/services/atlas/internal/kit"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// Tool names.
const (
	ToolCreate = "TASK_CREATE"
	ToolList   = "TASK_LIST"
	ToolUpdate = "TASK_UPDATE"
	ToolDelete = "TASK_DELETE"
)

const bucketTasks = "tasks"

// Task is one task.
type Task struct {
	TaskID      string   `json:"task_id"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	DueDate     *string  `json:"due_date"`
	Priority    string   `json:"priority"`
	Tags        []string `json:"tags"`
	Status      string   `json:"status"`
	CreatedAt   string   `json:"created_at"`
	UpdatedAt   string   `json:"updated_at"`
	CompletedAt *string  `json:"completed_at"`
}

const (
	tagsSchema     = `{"type":"array","maxItems":32,"uniqueItems":true,"items":{"type":"string","minLength":1,"maxLength":64}}`
	prioritySchema = `{"type":"string","enum":["low","medium","high"]}`
	statusSchema   = `{"type":"string","enum":["pending","in_progress","completed","cancelled"]}`
	dateSchema     = `{"type":["string","null"],"description":"YYYY-MM-DD"}`
)

var (
	createParams = `{"type":"object","additionalProperties":false,"required":["title"],"properties":{
	"title":{"type":"string","minLength":1,"maxLength":500},
	"description":{"type":"string","maxLength":20000},
	"due_date":{"type":"string","description":"YYYY-MM-DD"},
	"priority":` + prioritySchema + `,"tags":` + tagsSchema + `}}`
	listParams = `{"type":"object","additionalProperties":false,"properties":{
	"status":` + statusSchema + `,
	"due_before":{"type":"string","description":"YYYY-MM-DD; tasks due strictly before this date"},
	"tags":` + tagsSchema + `,
	"limit":{"type":"integer","minimum":1,"maximum":500}}}`
	updateParams = `{"type":"object","additionalProperties":false,"required":["task_id","updates"],"properties":{
	"task_id":{"type":"string","minLength":1},
	"updates":{"type":"object","additionalProperties":false,"minProperties":1,"properties":{
		"title":{"type":"string","minLength":1,"maxLength":500},
		"description":{"type":"string","maxLength":20000},
		"due_date":` + dateSchema + `,
		"priority":` + prioritySchema + `,"tags":` + tagsSchema + `,"status":` + statusSchema + `,
		"completed_at":{"type":["string","null"],"description":"RFC 3339"}}}}}`
	deleteParams = `{"type":"object","additionalProperties":false,"required":["task_id"],"properties":{"task_id":{"type":"string","minLength":1}}}`
)

// Service is the running atlas.tasks service.
type Service struct {
	*kit.Service
	tools []worker.Tool
}

// Open opens the service's data file and builds its tools.
func Open(deps atlas.Deps) (*Service, error) {
	ks, err := kit.New(atlas.GroupTasks, deps)
	if err != nil {
		return nil, err
	}
	tools, err := ks.Tools(
		kit.Spec{Name: ToolCreate, Description: "Creates a task. Returns task_id and created_at; undo is TASK_DELETE.", Params: createParams, Risk: registry.RiskLow, Run: create},
		kit.Spec{Name: ToolList, Description: "Lists tasks, filtered by status, due_before (exclusive), tags (all must match); total counts every match before limit.", Params: listParams, Risk: registry.RiskLow, ReadOnly: true, Run: list},
		kit.Spec{Name: ToolUpdate, Description: "Updates fields of a task. Returns before and after of the updated fields; undo is TASK_UPDATE with before.", Params: updateParams, Risk: registry.RiskLow, Run: update},
		kit.Spec{Name: ToolDelete, Description: "Deletes a task (the undo of TASK_CREATE). Returns deleted_data.", Params: deleteParams, Risk: registry.RiskLow, Run: remove},
	)
	if err != nil {
		_ = ks.Close()
		return nil, err
	}
	return &Service{Service: ks, tools: tools}, nil
}

// Tools are the service's worker tools.
func (s *Service) Tools() []worker.Tool { return s.tools }

// Build is the catalogue factory: it opens the service and returns its tools.
func Build(deps atlas.Deps) ([]worker.Tool, error) { return kit.Build(Open, deps) }

func create(x *kit.Exec) (kit.Outcome, error) {
	var a struct {
		Title       string   `json:"title"`
		Description string   `json:"description"`
		DueDate     *string  `json:"due_date"`
		Priority    string   `json:"priority"`
		Tags        []string `json:"tags"`
	}
	if err := x.Bind(&a); err != nil {
		return kit.Outcome{}, err
	}
	if a.DueDate != nil {
		if _, err := atime.ParseDate("due_date", *a.DueDate); err != nil {
			return kit.Outcome{}, toolkit.BadRequest("%v", err)
		}
	}
	if a.Priority == "" {
		a.Priority = "medium"
	}
	if a.Tags == nil {
		a.Tags = []string{}
	}
	t := Task{TaskID: x.ID("task", 0), Title: a.Title, Description: a.Description, DueDate: a.DueDate, Priority: a.Priority,
		Tags: a.Tags, Status: "pending", CreatedAt: x.Now(), UpdatedAt: x.Now()}
	b := x.Bucket(bucketTasks)
	if _, err := toolkit.PutNew(b, t.TaskID, t, x.ToolCallID); err != nil {
		return kit.Outcome{}, err
	}
	return kit.Outcome{
		Result:  map[string]any{"task_id": t.TaskID, "created_at": t.CreatedAt},
		Undo:    &receipts.Undo{ToolName: ToolDelete, Args: toolkit.Raw(map[string]string{"task_id": t.TaskID})},
		Changes: []receipts.Change{{Op: "create", Kind: "task", ID: t.TaskID, After: toolkit.Raw(t)}},
	}, nil
}

func list(x *kit.Exec) (kit.Outcome, error) {
	var a struct {
		Status    string   `json:"status"`
		DueBefore *string  `json:"due_before"`
		Tags      []string `json:"tags"`
		Limit     int      `json:"limit"`
	}
	if err := x.Bind(&a); err != nil {
		return kit.Outcome{}, err
	}
	if a.DueBefore != nil {
		if _, err := atime.ParseDate("due_before", *a.DueBefore); err != nil {
			return kit.Outcome{}, toolkit.BadRequest("%v", err)
		}
	}
	if a.Limit == 0 {
		a.Limit = 50
	}
	tasks := []Task{}
	b := x.Bucket(bucketTasks)
	{
		err := b.Scan("", false, func(_ string, v []byte) error {
			var t Task
			if err := json.Unmarshal(v, &t); err != nil {
				return err
			}
			if a.Status != "" && t.Status != a.Status {
				return nil
			}
			if a.DueBefore != nil && (t.DueDate == nil || *t.DueDate >= *a.DueBefore) {
				return nil
			}
			for _, tag := range a.Tags {
				if !slices.Contains(t.Tags, tag) {
					return nil
				}
			}
			tasks = append(tasks, t)
			return nil
		})
		if err != nil {
			return kit.Outcome{}, err
		}
	}
	// Due first (earliest first), then undated; ties by creation, then id.
	sort.SliceStable(tasks, func(i, j int) bool {
		ti, tj := tasks[i], tasks[j]
		if (ti.DueDate == nil) != (tj.DueDate == nil) {
			return ti.DueDate != nil
		}
		if ti.DueDate != nil && *ti.DueDate != *tj.DueDate {
			return *ti.DueDate < *tj.DueDate
		}
		if ti.CreatedAt != tj.CreatedAt {
			return ti.CreatedAt < tj.CreatedAt
		}
		return ti.TaskID < tj.TaskID
	})
	total := len(tasks)
	if len(tasks) > a.Limit {
		tasks = tasks[:a.Limit]
	}
	return kit.Outcome{Result: map[string]any{"tasks": tasks, "total": total}}, nil
}

func load(x *kit.Exec, id string) (Task, error) {
	var t Task
	b := x.Bucket(bucketTasks)
	found, err := toolkit.GetJSON(b, id, &t)
	if err != nil {
		return t, err
	}
	if !found {
		return t, toolkit.BadRequest("task_id %q: no such task in project %s (TASK_LIST shows the task ids)", id, x.Project)
	}
	return t, nil
}

func update(x *kit.Exec) (kit.Outcome, error) {
	var a struct {
		TaskID  string                     `json:"task_id"`
		Updates map[string]json.RawMessage `json:"updates"`
	}
	if err := x.Bind(&a); err != nil {
		return kit.Outcome{}, err
	}
	t, err := load(x, a.TaskID)
	if err != nil {
		return kit.Outcome{}, err
	}
	// Decode the task as a map so that before/after hold exactly the
	// updated fields, in their stored form.
	cur := map[string]json.RawMessage{}
	if err := json.Unmarshal(toolkit.Raw(t), &cur); err != nil {
		return kit.Outcome{}, err
	}
	updates := a.Updates
	if s, ok := updates["status"]; ok && string(s) == `"completed"` && t.Status != "completed" {
		if _, set := updates["completed_at"]; !set {
			updates["completed_at"] = toolkit.Raw(x.Now())
		}
	}
	for k, v := range updates {
		switch k {
		case "due_date":
			var d *string
			if err := json.Unmarshal(v, &d); err != nil {
				return kit.Outcome{}, toolkit.BadRequest("updates.due_date: %v", err)
			}
			if d != nil {
				if _, err := atime.ParseDate("updates.due_date", *d); err != nil {
					return kit.Outcome{}, toolkit.BadRequest("%v", err)
				}
			}
		case "completed_at":
			var d *string
			if err := json.Unmarshal(v, &d); err != nil {
				return kit.Outcome{}, toolkit.BadRequest("updates.completed_at: %v", err)
			}
			if d != nil {
				ts, err := atime.ParseTimestamp("updates.completed_at", *d)
				if err != nil {
					return kit.Outcome{}, toolkit.BadRequest("%v", err)
				}
				v = toolkit.Raw(ts.Format("2006-01-02T15:04:05Z07:00"))
				updates[k] = v
			}
		}
	}
	before, after := map[string]json.RawMessage{}, map[string]json.RawMessage{}
	for k, v := range updates {
		before[k] = cur[k]
		after[k] = v
		cur[k] = v
	}
	cur["updated_at"] = toolkit.Raw(x.Now())
	var next Task
	if err := json.Unmarshal(toolkit.Raw(cur), &next); err != nil {
		return kit.Outcome{}, toolkit.BadRequest("updates: %v", err)
	}
	if next.Tags == nil {
		next.Tags = []string{}
	}
	b := x.Bucket(bucketTasks)
	if err := toolkit.PutJSON(b, t.TaskID, next); err != nil {
		return kit.Outcome{}, err
	}
	return kit.Outcome{
		Result:  map[string]any{"task_id": t.TaskID, "before": before, "after": after},
		Undo:    &receipts.Undo{ToolName: ToolUpdate, Args: toolkit.Raw(map[string]any{"task_id": t.TaskID, "updates": before})},
		Changes: []receipts.Change{{Op: "update", Kind: "task", ID: t.TaskID, Before: toolkit.Raw(before), After: toolkit.Raw(after)}},
	}, nil
}

func remove(x *kit.Exec) (kit.Outcome, error) {
	var a struct {
		TaskID string `json:"task_id"`
	}
	if err := x.Bind(&a); err != nil {
		return kit.Outcome{}, err
	}
	t, err := load(x, a.TaskID)
	if err != nil {
		return kit.Outcome{}, err
	}
	b := x.Bucket(bucketTasks)
	if err := b.Delete(t.TaskID); err != nil {
		return kit.Outcome{}, err
	}
	undoArgs := map[string]any{"title": t.Title, "priority": t.Priority, "tags": t.Tags}
	if t.Description != "" {
		undoArgs["description"] = t.Description
	}
	if t.DueDate != nil {
		undoArgs["due_date"] = *t.DueDate
	}
	return kit.Outcome{
		Result:  map[string]any{"task_id": t.TaskID, "deleted": true, "deleted_data": t},
		Undo:    &receipts.Undo{ToolName: ToolCreate, Args: toolkit.Raw(undoArgs)},
		Changes: []receipts.Change{{Op: "delete", Kind: "task", ID: t.TaskID, Before: toolkit.Raw(t)}},
		Warnings: func() []string {
			if strings.TrimSpace(t.Status) != "pending" {
				return []string{"undo re-creates the task as pending with a new task_id; its status " + t.Status + " is not restored"}
			}
			return nil
		}(),
	}, nil
}
