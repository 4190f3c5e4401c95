package atlas_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/confirm"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/calendar"
	"github.com/utpmesh/utpmesh/services/atlas/internal/atlastest"
	"github.com/utpmesh/utpmesh/services/atlas/notes"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
	"github.com/utpmesh/utpmesh/services/atlas/utility"
	"github.com/utpmesh/utpmesh/services/atlas/workflows"
)

// start runs notes, calendar, workflows (scheduler driven by hand) and
// utility in one mesh.
func start(t *testing.T, ctx context.Context, dir, st string, now func() time.Time) (*atlastest.Harness, *workflows.Service) {
	var wf *workflows.Service
	with := func(b atlastest.Builder) atlastest.Builder {
		return func(d atlas.Deps) ([]worker.Tool, error) { d.State = st; return b(d) }
	}
	h := atlastest.StartIn(t, ctx, dir, with(notes.Build), with(calendar.Build), with(utility.Build),
		func(d atlas.Deps) ([]worker.Tool, error) {
			d.State = st
			s, err := workflows.OpenWith(d, workflows.Config{NoScheduler: true, Scheduler: workflows.SchedulerConfig{Now: now, Holder: "test"}})
			if err != nil {
				return nil, err
			}
			wf = s
			return s.Tools(), nil
		})
	return h, wf
}

// pending checks that v is a result parked for confirmation in the mesh's
// convention (package confirm), with the seed's five keys and no more, and
// that the convention's default resolvers are ATLAS_CONFIRM/ATLAS_CANCEL;
// it returns the confirmation id.
func pending(t *testing.T, v map[string]any) string {
	t.Helper()
	if v["status"] != receipts.StatusPendingConfirm || atlastest.Str(v, "confirmation_id") == "" || v["would"] == nil || v["expires_at"] == nil || len(v) != 5 {
		t.Fatalf("want PENDING_CONFIRM with status, confirmation_id, tool_name, would, expires_at; got %v", v)
	}
	raw, _ := json.Marshal(v)
	p, ok := confirm.Parse(raw)
	if !ok || p.Resolver(true) != utility.ToolConfirm || p.Resolver(false) != utility.ToolCancel {
		t.Fatalf("convention reads %s as %+v, %v; want resolvers %s/%s", raw, p, ok, utility.ToolConfirm, utility.ToolCancel)
	}
	return p.ConfirmationID
}

// TestATLAS runs the catalogue through a mesh on each state: the local
// files and the replicated (JetStream KV) one, which a restart of the mesh
// keeps in its JetStream directory.
func TestATLAS(t *testing.T) {
	for _, st := range []string{atlas.StateBolt, atlas.StateJetStream} {
		t.Run(st, func(t *testing.T) { testATLAS(t, st) })
	}
}

func testATLAS(t *testing.T, st string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Date(2024, 1, 15, 10, 30, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	dir := t.TempDir()
	h, wf := start(t, ctx, dir, st, func() time.Time { return clock() })

	t.Run("notes", func(t *testing.T) {
		turn := h.Turn()
		a := h.OK(turn, notes.ToolCreate, map[string]any{"title": "Q1 Deadlines", "content": "The project deadlines for January are tight. Ship the beta.", "tags": []string{"work"}})
		h.OK(turn, notes.ToolCreate, map[string]any{"title": "Groceries", "content": "milk, eggs, project supplies", "tags": []string{"home"}})
		h.OK(turn, notes.ToolCreate, map[string]any{"title": "Meeting Notes - Q1 Planning", "content": "# Attendees\n- Alice\n- Bob", "tags": []string{"work", "meetings"}})
		id := atlastest.Str(a, "note_id")
		got := h.OK(turn, notes.ToolGet, map[string]any{"note_id": id})
		if got["title"] != "Q1 Deadlines" || got["created_at"] != got["updated_at"] {
			t.Fatalf("get = %v", got)
		}
		for _, tc := range []struct {
			args  map[string]any
			first string
			total float64
		}{
			{map[string]any{"query": "project deadlines"}, "Q1 Deadlines", 2},
			{map[string]any{"query": "project", "tags": []string{"home"}}, "Groceries", 1},
			{map[string]any{"tags": []string{"work"}}, "", 2},
			{map[string]any{"query": "nothing-matches"}, "", 0},
		} {
			res := h.OK(turn, notes.ToolSearch, tc.args)
			if res["total"] != tc.total || (tc.first != "" && atlastest.Str(res, "notes", 0, "title") != tc.first) {
				t.Errorf("search %v = %v", tc.args, res)
			}
		}
		res := h.OK(turn, notes.ToolSearch, map[string]any{"query": "deadlines"})
		if s := atlastest.Str(res, "notes", 0, "snippet"); !strings.Contains(s, "deadlines for January") {
			t.Errorf("snippet = %q", s)
		}
		if r, _ := atlastest.Get(res, "notes", 0, "relevance").(float64); r <= 0 || r >= 1 {
			t.Errorf("relevance = %v", r)
		}
		del := h.OK(turn, notes.ToolDelete, map[string]any{"note_id": id})
		if atlastest.Str(del, "undo", "tool_name") != notes.ToolCreate {
			t.Fatalf("delete = %v", del)
		}
		h.Fail(turn, notes.ToolGet, map[string]any{"note_id": id}, card.CodeBadRequest)
	})

	t.Run("calendar: confirmation lifecycle and undo", func(t *testing.T) {
		turn := h.Turn()
		args := map[string]any{"date": "2024-01-15", "blocks": []map[string]any{
			{"title": "Deep Work: Project X", "start": "14:00", "end": "16:00", "type": "focus"},
			{"title": "Review PRs", "start": "16:00", "end": "17:00", "type": "task"}}}
		// A caller flag never bypasses confirmation.
		h.Fail(turn, calendar.ToolCreateBlocks, map[string]any{"date": "2024-01-15", "confirmed": true, "blocks": args["blocks"]}, card.CodeBadRequest)
		p := h.OK(turn, calendar.ToolCreateBlocks, args)
		id := pending(t, p)
		day := h.OK(turn, calendar.ToolGetDay, map[string]any{"date": "2024-01-15"})
		if len(day["blocks"].([]any)) != 0 {
			t.Fatalf("pending call executed: %v", day)
		}
		ok := h.OK(h.Turn(), utility.ToolConfirm, map[string]any{"confirmation_id": id})
		if ok["status"] != receipts.StatusOK || atlastest.Str(ok, "undo", "tool_name") != calendar.ToolDeleteBlocks {
			t.Fatalf("confirm = %v", ok)
		}
		created := atlastest.Get(ok, "result", "created").([]any)
		if len(created) != 2 || atlastest.Str(created[0], "title") != "Deep Work: Project X" {
			t.Fatalf("created = %v", created)
		}
		// Used once: a second confirm or a cancel fails, naming what happened.
		msg := h.Fail(h.Turn(), utility.ToolConfirm, map[string]any{"confirmation_id": id}, card.CodeBadRequest)
		if !strings.Contains(msg, "already used") || !strings.Contains(msg, "confirmed") {
			t.Fatalf("second confirm: %s", msg)
		}
		h.Fail(turn, utility.ToolCancel, map[string]any{"confirmation_id": id}, card.CodeBadRequest)

		day = h.OK(turn, calendar.ToolGetDay, map[string]any{"date": "2024-01-15"})
		free, _ := json.Marshal(day["free_slots"])
		if len(day["blocks"].([]any)) != 2 || string(free) != `[{"end":"14:00","start":"09:00"}]` {
			t.Fatalf("day = %v free %s", day, free)
		}
		wh := h.OK(turn, calendar.ToolGetDay, map[string]any{"date": "2024-01-15", "working_hours": map[string]string{"start": "08:00", "end": "18:00"}})
		free, _ = json.Marshal(wh["free_slots"])
		if string(free) != `[{"end":"14:00","start":"08:00"},{"end":"18:00","start":"17:00"}]` {
			t.Fatalf("free with working_hours = %s", free)
		}

		// Overlap refused (at plan time) unless allowed.
		msg = h.Fail(turn, calendar.ToolCreateBlocks, map[string]any{"date": "2024-01-15", "blocks": []map[string]any{{"title": "x", "start": "15:00", "end": "15:30"}}}, card.CodeBadRequest)
		if !strings.Contains(msg, "overlaps") || !strings.Contains(msg, "allow_overlap") {
			t.Fatalf("overlap: %s", msg)
		}
		for _, bad := range []map[string]any{
			{"date": "2024-01-15", "blocks": []map[string]any{{"title": "x", "start": "11:00", "end": "10:00"}}},
			{"date": "15.01.2024", "blocks": []map[string]any{{"title": "x", "start": "10:00", "end": "11:00"}}},
			{"date": "2024-01-15", "blocks": []map[string]any{{"title": "x", "start": "10h", "end": "11:00"}}},
		} {
			h.Fail(turn, calendar.ToolCreateBlocks, bad, card.CodeBadRequest)
		}
		over := h.OK(turn, calendar.ToolCreateBlocks, map[string]any{"date": "2024-01-16", "allow_overlap": true, "blocks": []map[string]any{
			{"title": "a", "start": "10:00", "end": "11:00"}, {"title": "b", "start": "10:30", "end": "11:30"}}})
		cancelID := pending(t, over)
		sk := h.OK(turn, utility.ToolCancel, map[string]any{"confirmation_id": cancelID})
		if sk["status"] != receipts.StatusSkipped {
			t.Fatalf("cancel = %v", sk)
		}
		if d := h.OK(turn, calendar.ToolGetDay, map[string]any{"date": "2024-01-16"}); len(d["blocks"].([]any)) != 0 {
			t.Fatalf("canceled call executed: %v", d)
		}

		// Undo (MVP 1): CALENDAR_CREATE_BLOCKS → CALENDAR_DELETE_BLOCKS with
		// the ids. Two blocks: the delete itself needs confirmation.
		undo := ok["undo"].(map[string]any)
		del := h.OK(turn, atlastest.Str(undo, "tool_name"), undo["args"])
		delRes := h.OK(turn, utility.ToolConfirm, map[string]any{"confirmation_id": pending(t, del)})
		if len(atlastest.Get(delRes, "result", "deleted_data").([]any)) != 2 || atlastest.Str(delRes, "undo", "tool_name") != calendar.ToolCreateBlocks {
			t.Fatalf("delete = %v", delRes)
		}
		if d := h.OK(turn, calendar.ToolGetDay, map[string]any{"date": "2024-01-15"}); len(d["blocks"].([]any)) != 0 {
			t.Fatalf("undo left blocks: %v", d)
		}
		// One block: deleted at once (no confirmation).
		one := h.OK(turn, calendar.ToolCreateBlocks, map[string]any{"date": "2024-01-17", "blocks": []map[string]any{{"title": "solo", "start": "09:00", "end": "10:00"}}})
		oneRes := h.OK(turn, utility.ToolConfirm, map[string]any{"confirmation_id": pending(t, one)})
		d1 := h.OK(turn, calendar.ToolDeleteBlocks, atlastest.Get(oneRes, "undo", "args"))
		if atlastest.Get(d1, "deleted", 0) == nil || d1["status"] != nil {
			t.Fatalf("single delete = %v", d1)
		}
		h.Fail(turn, utility.ToolConfirm, map[string]any{"confirmation_id": "cfm_nope_123"}, card.CodeBadRequest)
		h.Fail(turn, utility.ToolConfirm, map[string]any{"confirmation_id": "cfm_calendar_0000000000000000"}, card.CodeBadRequest)

		// Receipts: the original call's entry moved PENDING_CONFIRM → OK.
		r := h.Receipt(turn)
		var orig *receipts.ToolCall
		for i, c := range r.ToolCalls {
			if c.ConfirmationID == id {
				orig = &r.ToolCalls[i]
			}
		}
		if orig == nil || orig.Status != receipts.StatusOK || len(r.Transitions) < 3 {
			t.Fatalf("receipt entry %+v, transitions %+v", orig, r.Transitions)
		}
		var skipped bool
		for _, tr := range r.Transitions {
			skipped = skipped || (tr.ConfirmationID == cancelID && tr.To == receipts.StatusSkipped)
		}
		if !skipped || len(r.UndoSteps) == 0 {
			t.Fatalf("transitions %+v undo %+v", r.Transitions, r.UndoSteps)
		}
	})

	var wfID string
	t.Run("workflows: enable undo, run, logs, notify", func(t *testing.T) {
		turn := h.Turn()
		h.Fail(turn, workflows.ToolSave, map[string]any{"name": "x", "trigger": map[string]any{"type": "schedule", "cron": "0 25 * * *"}, "actions": []map[string]any{{"type": "notify", "message": "m"}}}, card.CodeBadRequest)
		h.Fail(turn, workflows.ToolSave, map[string]any{"name": "x", "enabled": true, "trigger": map[string]any{"type": "manual"}, "actions": []map[string]any{{"type": "notify", "message": "m"}}}, card.CodeBadRequest)
		saved := h.OK(turn, workflows.ToolSave, map[string]any{"name": "Daily Standup Reminder", "enabled": false,
			"trigger": map[string]any{"type": "schedule", "cron": "0 9 * * 1-5"}, "actions": []map[string]any{{"type": "notify", "message": "Time for standup!"}}})
		wfID = atlastest.Str(saved, "workflow_id")
		if saved["status"] != "saved" || saved["enabled"] != false || atlastest.Str(saved, "undo", "tool_name") != workflows.ToolDelete {
			t.Fatalf("save = %v", saved)
		}
		en := h.OK(turn, utility.ToolConfirm, map[string]any{"confirmation_id": pending(t, h.OK(turn, workflows.ToolEnable, map[string]any{"workflow_id": wfID, "enabled": true}))})
		if atlastest.Str(en, "result", "next_run") != "2024-01-16T09:00:00Z" {
			t.Fatalf("enable = %v", en)
		}
		// Undo (MVP 3): WORKFLOW_ENABLE(true) → WORKFLOW_ENABLE(false).
		undo := en["undo"].(map[string]any)
		if atlastest.Get(undo, "args", "enabled") != false {
			t.Fatalf("undo = %v", undo)
		}
		off := h.OK(turn, utility.ToolConfirm, map[string]any{"confirmation_id": pending(t, h.OK(turn, atlastest.Str(undo, "tool_name"), undo["args"]))})
		if atlastest.Get(off, "result", "enabled") != false || atlastest.Get(off, "result", "next_run") != nil {
			t.Fatalf("disable = %v", off)
		}

		// Manual run: notification on the evt subject, recorded in logs.
		sub, err := h.Mesh.Conn().SubscribeSync("cg.*.demo.*.evt.user.atlas.notify")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		run := h.OK(turn, utility.ToolConfirm, map[string]any{"confirmation_id": pending(t, h.OK(turn, workflows.ToolRun, map[string]any{"workflow_id": wfID}))})
		if atlastest.Str(run, "result", "status") != "completed" || atlastest.Get(run, "result", "actions_executed") != float64(1) {
			t.Fatalf("run = %v", run)
		}
		msg := nextMsg(t, sub)
		if !strings.Contains(string(msg.Data), "Time for standup!") {
			t.Fatalf("notification = %s", msg.Data)
		}
		logs := h.OK(turn, workflows.ToolLogs, map[string]any{"workflow_id": wfID})
		if atlastest.Str(logs, "logs", 0, "run_id") != atlastest.Str(run, "result", "run_id") || atlastest.Str(logs, "logs", 0, "trigger") != "manual" {
			t.Fatalf("logs = %v", logs)
		}

		// NOTIFY_USER: published and listed.
		n := h.OK(turn, utility.ToolNotifyUser, map[string]any{"message": "Your day has been planned!", "type": "success",
			"actions": []map[string]string{{"label": "View Plan", "action": "open_calendar"}}})
		if n["notified"] != true {
			t.Fatalf("notify = %v", n)
		}
		if m := nextMsg(t, sub); !strings.Contains(string(m.Data), "Your day has been planned!") {
			t.Fatalf("event = %s", m.Data)
		}
		list := h.OK(turn, utility.ToolNotifyList, map[string]any{})
		if list["total"] != float64(1) || atlastest.Str(list, "notifications", 0, "notification_id") != atlastest.Str(n, "notification_id") {
			t.Fatalf("list = %v", list)
		}
		if lg := h.OK(turn, utility.ToolLogEvent, map[string]any{"event_type": "intent_classified", "data": map[string]any{"intent": "CAPTURE_TASKS", "confidence": 0.95}}); lg["logged"] != true {
			t.Fatalf("log = %v", lg)
		}

		// Re-enable for the scheduler test.
		h.OK(turn, utility.ToolConfirm, map[string]any{"confirmation_id": pending(t, h.OK(turn, workflows.ToolEnable, map[string]any{"workflow_id": wfID}))})
	})

	t.Run("scheduler: runs at cron times, survives restart without loss or repeat", func(t *testing.T) {
		sched := wf.Scheduler()
		if ran, err := sched.RunDue(ctx); err != nil || len(ran) != 0 {
			t.Fatalf("nothing is due yet: %v %v", ran, err)
		}
		now = time.Date(2024, 1, 16, 9, 0, 30, 0, time.UTC)
		ran, err := sched.RunDue(ctx)
		if err != nil || len(ran) != 1 {
			t.Fatalf("RunDue = %v %v", ran, err)
		}
		if again, _ := sched.RunDue(ctx); len(again) != 0 {
			t.Fatalf("ran twice: %v", again)
		}
		// Restart the whole mesh on the same data directory, two weekdays
		// later: the two missed runs (17th, 18th) run once each.
		h.Stop()
		cancel()
		<-waitClosed(t, dir)
		now = time.Date(2024, 1, 18, 12, 0, 0, 0, time.UTC)
		ctx2, cancel2 := context.WithCancel(context.Background())
		defer cancel2()
		h2, wf2 := start(t, ctx2, dir, st, func() time.Time { return clock() })
		ran, err = wf2.Scheduler().RunDue(ctx2)
		if err != nil || len(ran) != 2 {
			t.Fatalf("after restart RunDue = %v %v", ran, err)
		}
		if again, _ := wf2.Scheduler().RunDue(ctx2); len(again) != 0 {
			t.Fatalf("ran twice after restart: %v", again)
		}
		logs := h2.OK(h2.Turn(), workflows.ToolLogs, map[string]any{"workflow_id": wfID, "limit": 10})
		var stamps []string
		for _, l := range logs["logs"].([]any) {
			stamps = append(stamps, atlastest.Str(l, "trigger")+"@"+atlastest.Str(l, "timestamp")+":"+atlastest.Str(l, "status"))
		}
		want := "schedule@2024-01-18T09:00:00Z:completed|schedule@2024-01-17T09:00:00Z:completed|schedule@2024-01-16T09:00:00Z:completed"
		if !strings.HasPrefix(strings.Join(stamps, "|"), want) {
			t.Fatalf("logs = %v", stamps)
		}
	})
}

// waitClosed returns a channel closed once the services released the data
// files (their Context ended), polling with a deadline.
func waitClosed(t *testing.T, dir string) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if free(dir) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return ch
}

func nextMsg(t *testing.T, sub *nats.Subscription) *nats.Msg {
	t.Helper()
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no notification event: %v", err)
	}
	return m
}
