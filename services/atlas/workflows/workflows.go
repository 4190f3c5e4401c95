// Package workflows is the atlas.workflows service: WORKFLOW_SAVE,
// WORKFLOW_DELETE, WORKFLOW_ENABLE, WORKFLOW_RUN and WORKFLOW_LOGS over
// workflows kept in the group's state (<DataDir>/atlas-workflows.db, or the
// shared KV bucket atlas_workflows), and the Scheduler that
// runs enabled workflows at their cron times.
//
// A workflow has a trigger ({"type":"schedule","cron":"0 9 * * 1-5"}, with
// an optional IANA "timezone", default UTC; or {"type":"manual"}) and
// actions: {"type":"notify","message":…} publishes a user notification
// (package notify), {"type":"log","event_type":…,"data":…} records an
// event in the run. WORKFLOW_SAVE never enables (LOW); WORKFLOW_ENABLE
// (HIGH) and WORKFLOW_RUN (MEDIUM) always need confirmation. Undo steps:
// SAVE → DELETE; DELETE → SAVE with the definition; ENABLE(x) →
// ENABLE(!x); RUN has none (a sent notification cannot be unsent).
//
// Scheduling: ENABLE stores next_run, the first cron time after the call.
// The scheduler (see Scheduler) records each due run under a deterministic
// run id and executes it under the run's CardStore claim, so neither a
// restart nor a second scheduler on the shared state loses or repeats a
// run.
package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/internal/cron"
	"github.com/utpmesh/utpmesh/services/atlas/internal/determ"
	"github.com/utpmesh/utpmesh/services/atlas/internal/kit"
	"github.com/utpmesh/utpmesh/services/atlas/internal/notify"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// Tool names.
const (
	ToolSave   = "WORKFLOW_SAVE"
	ToolDelete = "WORKFLOW_DELETE"
	ToolEnable = "WORKFLOW_ENABLE"
	ToolRun    = "WORKFLOW_RUN"
	ToolLogs   = "WORKFLOW_LOGS"
)

const (
	bucketWorkflows = "workflows"
	bucketRuns      = "runs"   // run_id → Run
	bucketRunLog    = "runlog" // workflow_id \x00 timestamp \x00 run_id → ""
)

// Trigger says when a workflow runs.
type Trigger struct {
	Type     string `json:"type"`
	Cron     string `json:"cron,omitempty"`
	Timezone string `json:"timezone,omitempty"`
}

// Action is one step of a workflow.
type Action struct {
	Type             string          `json:"type"`
	Message          string          `json:"message,omitempty"`
	NotificationType string          `json:"notification_type,omitempty"`
	EventType        string          `json:"event_type,omitempty"`
	Data             json.RawMessage `json:"data,omitempty"`
}

// Workflow is a saved workflow.
type Workflow struct {
	WorkflowID string   `json:"workflow_id"`
	Name       string   `json:"name"`
	Trigger    Trigger  `json:"trigger"`
	Actions    []Action `json:"actions"`
	Enabled    bool     `json:"enabled"`
	NextRun    *string  `json:"next_run"`
	ProjectID  string   `json:"project_id"`
	ChannelID  string   `json:"channel_id"`
	Version    string   `json:"version"`
	CreatedAt  string   `json:"created_at"`
	UpdatedAt  string   `json:"updated_at"`
}

// ActionResult is what one action did in a run.
type ActionResult struct {
	Type           string          `json:"type"`
	Status         string          `json:"status"`
	NotificationID string          `json:"notification_id,omitempty"`
	Message        string          `json:"message,omitempty"`
	EventType      string          `json:"event_type,omitempty"`
	Data           json.RawMessage `json:"data,omitempty"`
	Error          string          `json:"error,omitempty"`
}

// Run is one execution of a workflow (a WORKFLOW_LOGS entry).
type Run struct {
	RunID      string `json:"run_id"`
	WorkflowID string `json:"workflow_id"`
	// Timestamp is when the run executed: the confirming call's time, or
	// the scheduled time.
	Timestamp string `json:"timestamp"`
	// Status is running (claimed, not finished), completed or failed.
	Status string `json:"status"`
	// Trigger is manual or schedule.
	Trigger      string         `json:"trigger"`
	ScheduledFor string         `json:"scheduled_for,omitempty"`
	Actions      []ActionResult `json:"actions"`
}

var (
	actionSchema = `{"type":"object","required":["type"],"additionalProperties":false,"properties":{
		"type":{"type":"string","enum":["notify","log"]},
		"message":{"type":"string","minLength":1,"maxLength":2000},
		"notification_type":{"type":"string","enum":["info","success","warning","error"]},
		"event_type":{"type":"string","minLength":1,"maxLength":128},"data":{}}}`
	saveParams = `{"type":"object","additionalProperties":false,"required":["name","trigger","actions"],"properties":{
	"name":{"type":"string","minLength":1,"maxLength":200},
	"trigger":{"type":"object","additionalProperties":false,"required":["type"],"properties":{
		"type":{"type":"string","enum":["schedule","manual"]},"cron":{"type":"string"},"timezone":{"type":"string"}}},
	"actions":{"type":"array","minItems":1,"maxItems":50,"items":` + actionSchema + `},
	"enabled":{"type":"boolean","description":"must be false or absent: WORKFLOW_SAVE never enables"}}}`
	idParams     = `{"type":"object","additionalProperties":false,"required":["workflow_id"],"properties":{"workflow_id":{"type":"string","minLength":1}}}`
	enableParams = `{"type":"object","additionalProperties":false,"required":["workflow_id"],"properties":{"workflow_id":{"type":"string","minLength":1},"enabled":{"type":"boolean","description":"default true"}}}`
	logsParams   = `{"type":"object","additionalProperties":false,"required":["workflow_id"],"properties":{"workflow_id":{"type":"string","minLength":1},"limit":{"type":"integer","minimum":1,"maximum":100}}}`
)

// Service is the running atlas.workflows service.
type Service struct {
	*kit.Service
	tools []worker.Tool
	sched *Scheduler
}

// Config configures the service.
type Config struct {
	// Scheduler configures the scheduler; see SchedulerConfig.
	Scheduler SchedulerConfig
	// NoScheduler leaves the scheduler stopped (Scheduler().RunDue can
	// still be called).
	NoScheduler bool
}

// Open opens the service with the default Config: the scheduler runs
// (with the wall clock) until deps.Context ends.
func Open(deps atlas.Deps) (*Service, error) { return OpenWith(deps, Config{}) }

// OpenWith opens the service's data file, builds its tools and starts the
// scheduler unless cfg.NoScheduler.
func OpenWith(deps atlas.Deps, cfg Config) (*Service, error) {
	ks, err := kit.New(atlas.GroupWorkflows, deps)
	if err != nil {
		return nil, err
	}
	tools, err := ks.Tools(
		kit.Spec{Name: ToolSave, Description: "Saves a workflow (trigger + actions). Never enables it. Undo: WORKFLOW_DELETE.", Params: saveParams, Risk: registry.RiskLow, Run: save},
		kit.Spec{Name: ToolDelete, Description: "Deletes a workflow (the undo of WORKFLOW_SAVE); its run logs are kept.", Params: idParams, Risk: registry.RiskLow, Run: remove},
		kit.Spec{Name: ToolEnable, Description: "Enables (or, with enabled:false, disables) a workflow; returns next_run from its cron trigger. Always requires confirmation. Undo: WORKFLOW_ENABLE with the opposite value.", Params: enableParams,
			Risk: registry.RiskHigh, Confirmation: registry.ConfirmAlways, Plan: planEnable, Run: enable},
		kit.Spec{Name: ToolRun, Description: "Runs a workflow's actions now. Always requires confirmation. Returns run_id, status, actions_executed.", Params: idParams,
			Risk: registry.RiskMedium, Confirmation: registry.ConfirmAlways, Plan: planRun, Run: runNow},
		kit.Spec{Name: ToolLogs, Description: "Returns a workflow's runs, newest first (manual and scheduled).", Params: logsParams, Risk: registry.RiskLow, ReadOnly: true, Run: logs},
	)
	if err != nil {
		_ = ks.Close()
		return nil, err
	}
	s := &Service{Service: ks, tools: tools}
	s.sched = newScheduler(ks, cfg.Scheduler)
	if !cfg.NoScheduler {
		go s.sched.loop()
	}
	return s, nil
}

// Tools are the service's worker tools.
func (s *Service) Tools() []worker.Tool { return s.tools }

// Scheduler is the service's scheduler.
func (s *Service) Scheduler() *Scheduler { return s.sched }

// Build is the catalogue factory.
func Build(deps atlas.Deps) ([]worker.Tool, error) { return kit.Build(Open, deps) }

// nextRun computes the first cron time after t (nil for manual triggers).
func nextRun(tr Trigger, t time.Time) (*string, error) {
	if tr.Type != "schedule" {
		return nil, nil
	}
	sched, err := cron.Parse(tr.Cron)
	if err != nil {
		return nil, toolkit.BadRequest("trigger.cron: %v", err)
	}
	loc := time.UTC
	if tr.Timezone != "" {
		if loc, err = time.LoadLocation(tr.Timezone); err != nil {
			return nil, toolkit.BadRequest("trigger.timezone %q is not an IANA time zone (e.g. Europe/Paris, America/New_York): %v", tr.Timezone, err)
		}
	}
	n, ok := sched.Next(t.In(loc))
	if !ok {
		return nil, toolkit.BadRequest("trigger.cron %q never matches a real date (e.g. 31 February); fix the day and month fields", tr.Cron)
	}
	s := determ.Format(n)
	return &s, nil
}

func save(x *kit.Exec) (kit.Outcome, error) {
	var a struct {
		Name    string   `json:"name"`
		Trigger Trigger  `json:"trigger"`
		Actions []Action `json:"actions"`
		Enabled bool     `json:"enabled"`
	}
	if err := x.Bind(&a); err != nil {
		return kit.Outcome{}, err
	}
	if a.Enabled {
		return kit.Outcome{}, toolkit.BadRequest("enabled: WORKFLOW_SAVE never enables a workflow; save it with enabled false (or omit it), then call WORKFLOW_ENABLE")
	}
	switch a.Trigger.Type {
	case "schedule":
		if _, err := nextRun(a.Trigger, x.Time); err != nil {
			return kit.Outcome{}, err
		}
	case "manual":
		if a.Trigger.Cron != "" {
			return kit.Outcome{}, toolkit.BadRequest("trigger.cron is set but trigger.type is manual; use type schedule for a cron trigger")
		}
	}
	for i, act := range a.Actions {
		switch {
		case act.Type == "notify" && act.Message == "":
			return kit.Outcome{}, toolkit.BadRequest("actions[%d]: a notify action needs a message", i)
		case act.Type == "log" && act.EventType == "":
			return kit.Outcome{}, toolkit.BadRequest("actions[%d]: a log action needs an event_type", i)
		}
	}
	w := Workflow{WorkflowID: x.ID("wf", 0), Name: a.Name, Trigger: a.Trigger, Actions: a.Actions, ProjectID: x.Project,
		ChannelID: x.Channel, Version: x.Version, CreatedAt: x.Now(), UpdatedAt: x.Now()}
	b := x.Bucket(bucketWorkflows)
	if _, err := toolkit.PutNew(b, w.WorkflowID, w, x.ToolCallID); err != nil {
		return kit.Outcome{}, err
	}
	return kit.Outcome{
		Result:  map[string]any{"workflow_id": w.WorkflowID, "status": "saved", "enabled": false},
		Undo:    &receipts.Undo{ToolName: ToolDelete, Args: toolkit.Raw(map[string]string{"workflow_id": w.WorkflowID})},
		Changes: []receipts.Change{{Op: "create", Kind: "workflow", ID: w.WorkflowID, After: toolkit.Raw(w)}},
	}, nil
}

func load(x *kit.Exec) (Workflow, error) {
	var a struct {
		WorkflowID string `json:"workflow_id"`
	}
	var w Workflow
	if err := x.Bind(&a); err != nil {
		return w, err
	}
	b := x.Bucket(bucketWorkflows)
	found, err := toolkit.GetJSON(b, a.WorkflowID, &w)
	if err != nil {
		return w, err
	}
	if !found {
		return w, toolkit.BadRequest("workflow_id %q: no such workflow in project %s (WORKFLOW_SAVE returns the id)", a.WorkflowID, x.Project)
	}
	return w, nil
}

func remove(x *kit.Exec) (kit.Outcome, error) {
	w, err := load(x)
	if err != nil {
		return kit.Outcome{}, err
	}
	b := x.Bucket(bucketWorkflows)
	if err := b.Delete(w.WorkflowID); err != nil {
		return kit.Outcome{}, err
	}
	var warn []string
	if w.Enabled {
		warn = append(warn, "the workflow was enabled; undo saves it again disabled")
	}
	return kit.Outcome{
		Result:   map[string]any{"workflow_id": w.WorkflowID, "deleted": true, "deleted_data": w},
		Undo:     &receipts.Undo{ToolName: ToolSave, Args: toolkit.Raw(map[string]any{"name": w.Name, "trigger": w.Trigger, "actions": w.Actions})},
		Changes:  []receipts.Change{{Op: "delete", Kind: "workflow", ID: w.WorkflowID, Before: toolkit.Raw(w)}},
		Warnings: warn,
	}, nil
}

func enableArgs(x *kit.Exec) (bool, error) {
	a := struct {
		Enabled *bool `json:"enabled"`
	}{}
	if err := x.Bind(&a); err != nil {
		return false, err
	}
	return a.Enabled == nil || *a.Enabled, nil
}

func planEnable(x *kit.Exec) (any, error) {
	w, err := load(x)
	if err != nil {
		return nil, err
	}
	on, err := enableArgs(x)
	if err != nil {
		return nil, err
	}
	var next *string
	if on {
		if next, err = nextRun(w.Trigger, x.Time); err != nil {
			return nil, err
		}
	}
	return map[string]any{"action": map[bool]string{true: "enable workflow", false: "disable workflow"}[on],
		"workflow_id": w.WorkflowID, "name": w.Name, "trigger": w.Trigger, "enabled": on, "next_run": next}, nil
}

func enable(x *kit.Exec) (kit.Outcome, error) {
	w, err := load(x)
	if err != nil {
		return kit.Outcome{}, err
	}
	on, err := enableArgs(x)
	if err != nil {
		return kit.Outcome{}, err
	}
	before := map[string]any{"enabled": w.Enabled, "next_run": w.NextRun}
	w.Enabled, w.NextRun = on, nil
	if on {
		if w.NextRun, err = nextRun(w.Trigger, x.Time); err != nil {
			return kit.Outcome{}, err
		}
	}
	w.UpdatedAt = x.Now()
	b := x.Bucket(bucketWorkflows)
	if err := toolkit.PutJSON(b, w.WorkflowID, w); err != nil {
		return kit.Outcome{}, err
	}
	return kit.Outcome{
		Result:  map[string]any{"workflow_id": w.WorkflowID, "enabled": on, "next_run": w.NextRun},
		Undo:    &receipts.Undo{ToolName: ToolEnable, Args: toolkit.Raw(map[string]any{"workflow_id": w.WorkflowID, "enabled": !on})},
		Changes: []receipts.Change{{Op: "update", Kind: "workflow", ID: w.WorkflowID, Before: toolkit.Raw(before), After: toolkit.Raw(map[string]any{"enabled": on, "next_run": w.NextRun})}},
	}, nil
}

func planRun(x *kit.Exec) (any, error) {
	w, err := load(x)
	if err != nil {
		return nil, err
	}
	return map[string]any{"action": "run workflow now", "workflow_id": w.WorkflowID, "name": w.Name, "actions": w.Actions}, nil
}

func runNow(x *kit.Exec) (kit.Outcome, error) {
	w, err := load(x)
	if err != nil {
		return kit.Outcome{}, err
	}
	run := Run{RunID: x.ID("run", 0), WorkflowID: w.WorkflowID, Timestamp: x.Now(), Trigger: "manual"}
	notes := prepare(&run, w)
	run.Status = "completed"
	if err := putRun(x.Tx, x.Project, run); err != nil {
		return kit.Outcome{}, err
	}
	svc := x.Svc
	ver := x.Version
	return kit.Outcome{
		Result:  map[string]any{"run_id": run.RunID, "status": run.Status, "actions_executed": len(run.Actions)},
		Changes: []receipts.Change{{Op: "create", Kind: "run", ID: run.RunID, After: toolkit.Raw(run)}},
		After:   func(ctx context.Context) error { return publishAll(ctx, svc, ver, notes) },
	}, nil
}

// prepare fills run.Actions from the workflow and returns the
// notifications its notify actions send (ids derived from the run id).
func prepare(run *Run, w Workflow) []notify.Notification {
	var out []notify.Notification
	run.Actions = []ActionResult{}
	for i, a := range w.Actions {
		r := ActionResult{Type: a.Type, Status: "done"}
		switch a.Type {
		case "notify":
			typ := a.NotificationType
			if typ == "" {
				typ = "info"
			}
			n := notify.Notification{NotificationID: "ntf_" + determ.Hash(16, run.RunID, fmt.Sprint(i)), ProjectID: w.ProjectID, ChannelID: w.ChannelID,
				Message: a.Message, Type: typ, Actions: []notify.Action{}, CreatedAt: run.Timestamp,
				Source: notify.Source{WorkflowID: w.WorkflowID, RunID: run.RunID}}
			out = append(out, n)
			r.NotificationID, r.Message = n.NotificationID, a.Message
		case "log":
			r.EventType, r.Data = a.EventType, a.Data
		}
		run.Actions = append(run.Actions, r)
	}
	return out
}

func putRun(tx state.Tx, project string, run Run) error {
	if err := toolkit.PutJSON(tx.Bucket(project, bucketRuns), run.RunID, run); err != nil {
		return err
	}
	return tx.Bucket(project, bucketRunLog).Put(run.WorkflowID+"\x00"+run.Timestamp+"\x00"+run.RunID, nil)
}

func logs(x *kit.Exec) (kit.Outcome, error) {
	var a struct {
		WorkflowID string `json:"workflow_id"`
		Limit      int    `json:"limit"`
	}
	if err := x.Bind(&a); err != nil {
		return kit.Outcome{}, err
	}
	if a.Limit == 0 {
		a.Limit = 10
	}
	out := []Run{}
	runs := x.Bucket(bucketRuns)
	// Newest first: the log keys sort by workflow, then timestamp.
	err := x.Bucket(bucketRunLog).Scan(a.WorkflowID+"\x00", true, func(k string, _ []byte) error {
		if len(out) == a.Limit {
			return state.ErrStop
		}
		id := k[len(k)-len("run_")-16:]
		var r Run
		found, err := toolkit.GetJSON(runs, id, &r)
		if found {
			out = append(out, r)
		}
		return err
	})
	if err != nil {
		return kit.Outcome{}, err
	}
	if len(out) == 0 {
		if _, found, err := x.Bucket(bucketWorkflows).Get(a.WorkflowID); err != nil {
			return kit.Outcome{}, err
		} else if !found {
			return kit.Outcome{}, toolkit.BadRequest("workflow_id %q: no such workflow and no runs in project %s", a.WorkflowID, x.Project)
		}
	}
	return kit.Outcome{Result: map[string]any{"workflow_id": a.WorkflowID, "logs": out}}, nil
}
