package tasks_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/internal/atlastest"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
	"github.com/utpmesh/utpmesh/services/atlas/tasks"
)

func TestTasksThroughTheMesh(t *testing.T) {
	for _, st := range []string{atlas.StateBolt, atlas.StateJetStream} {
		t.Run(st, func(t *testing.T) {
			build := func(d atlas.Deps) ([]worker.Tool, error) { d.State = st; return tasks.Build(d) }
			testTasks(t, build)
		})
	}
}

func testTasks(t *testing.T, build atlastest.Builder) {
	h := atlastest.Start(t, context.Background(), build)
	turn := h.Turn()

	created := h.OK(turn, tasks.ToolCreate, map[string]any{"title": "Buy dog food", "description": "Get the large bag from PetSmart",
		"due_date": "2024-01-20", "priority": "medium", "tags": []string{"errands", "pets"}})
	id := atlastest.Str(created, "task_id")
	if !strings.HasPrefix(id, "task_") || created["created_at"] != "2024-01-15T10:30:00Z" {
		t.Fatalf("create = %v", created)
	}
	if atlastest.Str(created, "undo", "tool_name") != tasks.ToolDelete || atlastest.Str(created, "undo", "args", "task_id") != id {
		t.Fatalf("undo = %v", created["undo"])
	}
	h.OK(turn, tasks.ToolCreate, map[string]any{"title": "Write report", "due_date": "2024-01-18", "tags": []string{"work"}})
	h.OK(turn, tasks.ToolCreate, map[string]any{"title": "Someday", "tags": []string{"work"}})

	t.Run("list", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			args  map[string]any
			want  []string
			total float64
		}{
			{"all, due first", map[string]any{}, []string{"Write report", "Buy dog food", "Someday"}, 3},
			{"tag", map[string]any{"tags": []string{"work"}}, []string{"Write report", "Someday"}, 2},
			{"due_before exclusive", map[string]any{"due_before": "2024-01-20"}, []string{"Write report"}, 1},
			{"limit keeps total", map[string]any{"limit": 1}, []string{"Write report"}, 3},
			{"status", map[string]any{"status": "completed"}, nil, 0},
		} {
			got := h.OK(turn, tasks.ToolList, tc.args)
			var titles []string
			for _, task := range got["tasks"].([]any) {
				titles = append(titles, atlastest.Str(task, "title"))
			}
			if strings.Join(titles, "|") != strings.Join(tc.want, "|") || got["total"] != tc.total {
				t.Errorf("%s: titles %v total %v", tc.name, titles, got["total"])
			}
		}
	})

	t.Run("update and its undo", func(t *testing.T) {
		up := h.OK(turn, tasks.ToolUpdate, map[string]any{"task_id": id, "updates": map[string]any{"status": "completed", "completed_at": "2024-01-15T14:00:00Z"}})
		if atlastest.Str(up, "before", "status") != "pending" || atlastest.Str(up, "after", "status") != "completed" ||
			atlastest.Get(up, "before", "completed_at") != nil || atlastest.Str(up, "after", "completed_at") != "2024-01-15T14:00:00Z" {
			t.Fatalf("update = %v", up)
		}
		undo := up["undo"].(map[string]any)
		back := h.OK(turn, atlastest.Str(undo, "tool_name"), undo["args"])
		if atlastest.Str(back, "after", "status") != "pending" {
			t.Fatalf("undo result = %v", back)
		}
		got := h.OK(turn, tasks.ToolList, map[string]any{"status": "pending", "tags": []string{"pets"}})
		if got["total"] != float64(1) || atlastest.Get(got, "tasks", 0, "completed_at") != nil {
			t.Fatalf("after undo: %v", got)
		}
	})

	t.Run("bad arguments", func(t *testing.T) {
		for _, tc := range []struct {
			tool string
			args map[string]any
			want string
		}{
			{tasks.ToolUpdate, map[string]any{"task_id": "task_nope", "updates": map[string]any{"title": "x"}}, "no such task"},
			{tasks.ToolCreate, map[string]any{"title": "x", "due_date": "20/01/2024"}, "YYYY-MM-DD"},
			{tasks.ToolUpdate, map[string]any{"task_id": id, "updates": map[string]any{"completed_at": "yesterday"}}, "RFC 3339"},
			{tasks.ToolDelete, map[string]any{"task_id": "task_nope"}, "no such task"},
			{tasks.ToolCreate, map[string]any{"title": "x", "confirmed": true}, "confirmed"},
		} {
			if msg := h.Fail(turn, tc.tool, tc.args, card.CodeBadRequest); !strings.Contains(msg, tc.want) {
				t.Errorf("%s %v: message %q lacks %q", tc.tool, tc.args, msg, tc.want)
			}
		}
	})

	t.Run("delete is the undo of create", func(t *testing.T) {
		tmp := h.OK(turn, tasks.ToolCreate, map[string]any{"title": "temp"})
		undo := tmp["undo"].(map[string]any)
		del := h.OK(turn, atlastest.Str(undo, "tool_name"), undo["args"])
		if del["deleted"] != true || atlastest.Str(del, "deleted_data", "title") != "temp" || atlastest.Str(del, "undo", "tool_name") != tasks.ToolCreate {
			t.Fatalf("delete = %v", del)
		}
		h.Fail(turn, tasks.ToolDelete, undo["args"], card.CodeBadRequest)
	})

	t.Run("replay is deterministic and idempotent", func(t *testing.T) {
		tr := h.Turn()
		at := h.Time
		a := h.CallID(tr, "same-call", tasks.ToolCreate, map[string]any{"title": "once"})
		// Replaying the turn into a fresh mesh (same ids, same call time)
		// reproduces the result byte for byte.
		h2 := atlastest.Start(t, context.Background(), build)
		h2.Time = at
		b := h2.CallID(tr, "same-call", tasks.ToolCreate, map[string]any{"title": "once"})
		if string(a.Raw) != string(b.Raw) {
			t.Fatalf("replay differs: %s vs %s", a.Raw, b.Raw)
		}
		// Another turn reusing the tool_call_id with other content is refused.
		c := h.CallID(h.Turn(), "same-call", tasks.ToolCreate, map[string]any{"title": "other"})
		if c.Status != card.StatusFailed || !strings.Contains(c.Error.Message, "reused") {
			t.Fatalf("reuse = %s %+v", c.Status, c.Error)
		}
	})

	t.Run("receipt", func(t *testing.T) {
		r := h.Receipt(turn)
		if len(r.ToolCalls) < 10 {
			t.Fatalf("tool_calls = %d", len(r.ToolCalls))
		}
		first := r.ToolCalls[0]
		if first.ToolName != tasks.ToolCreate || first.Status != receipts.StatusOK || first.TimestampUTC != "2024-01-15T10:30:00Z" {
			t.Fatalf("first entry = %+v", first)
		}
		var args map[string]any
		_ = json.Unmarshal(first.Args, &args)
		if args["title"] != "Buy dog food" {
			t.Fatalf("args = %s", first.Args)
		}
		failed := 0
		for _, c := range r.ToolCalls {
			if c.Status == receipts.StatusFailed {
				failed++
			}
		}
		// Four refused by the handler, one by the schema (confirmed: true),
		// one delete of a deleted task.
		if failed != 6 || len(r.Errors) != 6 {
			t.Fatalf("failed entries = %d, errors = %+v", failed, r.Errors)
		}
		if len(r.UndoSteps) == 0 || len(r.Changes) == 0 {
			t.Fatalf("undo steps %d, changes %d", len(r.UndoSteps), len(r.Changes))
		}
	})
}
