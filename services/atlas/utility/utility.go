// Package utility is the atlas.utility service: LOG_EVENT, NOTIFY_USER,
// NOTIFY_LIST, and ATLAS_CONFIRM / ATLAS_CANCEL, which resolve the pending
// confirmations of every ATLAS group.
//
// NOTIFY_USER keeps the notification in <DataDir>/atlas-utility.db (listed
// by NOTIFY_LIST, newest first) and publishes it on
// cg.<ver>.<project>.<channel>.evt.user.atlas.notify (package notify).
//
// ATLAS_CONFIRM {confirmation_id} and ATLAS_CANCEL {confirmation_id} read
// the group from the id (cfm_<group>_<hash>) and send a resolve request to
// that group's confirmation endpoint (svc atlas-<group>.resolve). The group
// executes or cancels its pending call; this call's result is
// {"status":"OK","confirmation_id","tool_name","result","undo"} or
// {"status":"SKIPPED",...}; an action that fails ends this call failed with
// the action's error code and detail {"status":"FAILED",...}.
package utility

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/confirm"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/internal/kit"
	"github.com/utpmesh/utpmesh/services/atlas/internal/notify"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// Tool names. ToolConfirm and ToolCancel are the confirmation
// convention's default resolvers (confirm.DefaultConfirmTool,
// confirm.DefaultCancelTool), which is why ATLAS's pending results name
// none.
const (
	ToolLogEvent   = "LOG_EVENT"
	ToolNotifyUser = "NOTIFY_USER"
	ToolNotifyList = "NOTIFY_LIST"
	ToolConfirm    = "ATLAS_CONFIRM"
	ToolCancel     = "ATLAS_CANCEL"
)

const (
	bucketEvents = "events"        // created_at \x00 event_id → Event
	bucketNotes  = "notifications" // created_at \x00 notification_id → Notification
)

// Event is one logged event.
type Event struct {
	EventID     string          `json:"event_id"`
	EventType   string          `json:"event_type"`
	Data        json.RawMessage `json:"data"`
	AgentTurnID string          `json:"agent_turn_id"`
	ToolCallID  string          `json:"tool_call_id"`
	CreatedAt   string          `json:"created_at"`
}

var (
	logParams = `{"type":"object","additionalProperties":false,"required":["event_type"],"properties":{
	"event_type":{"type":"string","minLength":1,"maxLength":128},"data":{"type":"object"}}}`
	notifyParams = `{"type":"object","additionalProperties":false,"required":["message"],"properties":{
	"message":{"type":"string","minLength":1,"maxLength":2000},
	"type":{"type":"string","enum":["info","success","warning","error"]},
	"actions":{"type":"array","maxItems":5,"items":{"type":"object","additionalProperties":false,"required":["label","action"],"properties":{
		"label":{"type":"string","minLength":1,"maxLength":100},"action":{"type":"string","minLength":1,"maxLength":200}}}}}}`
	listParams    = `{"type":"object","additionalProperties":false,"properties":{"limit":{"type":"integer","minimum":1,"maximum":200}}}`
	resolveParams = `{"type":"object","additionalProperties":false,"required":["confirmation_id"],"properties":{"confirmation_id":{"type":"string","minLength":1,"maxLength":128}}}`
)

// Service is the running atlas.utility service.
type Service struct {
	*kit.Service
	tools []worker.Tool
}

// Open opens the service's data file and builds its tools.
func Open(deps atlas.Deps) (*Service, error) {
	ks, err := kit.New(atlas.GroupUtility, deps)
	if err != nil {
		return nil, err
	}
	tools, err := ks.Tools(
		kit.Spec{Name: ToolLogEvent, Description: "Logs an event (event_type, data) for analytics or debugging. Returns logged: true.", Params: logParams, Risk: registry.RiskLow, Run: logEvent},
		kit.Spec{Name: ToolNotifyUser, Description: "Sends the user a notification (message, type, action buttons): published on evt.user.atlas.notify and kept for NOTIFY_LIST.", Params: notifyParams, Risk: registry.RiskLow, Run: notifyUser},
		kit.Spec{Name: ToolNotifyList, Description: "Lists kept notifications, newest first.", Params: listParams, Risk: registry.RiskLow, ReadOnly: true, Run: notifyList},
		kit.Spec{Name: ToolConfirm, Description: "Confirms a PENDING_CONFIRM call by its confirmation_id: the call executes now. Usable once per id.", Params: resolveParams, Risk: registry.RiskLow, Direct: resolver(kit.ActionConfirm)},
		kit.Spec{Name: ToolCancel, Description: "Cancels a PENDING_CONFIRM call by its confirmation_id: it ends SKIPPED and never executes.", Params: resolveParams, Risk: registry.RiskLow, Direct: resolver(kit.ActionCancel)},
	)
	if err != nil {
		_ = ks.Close()
		return nil, err
	}
	return &Service{Service: ks, tools: tools}, nil
}

// Tools are the service's worker tools.
func (s *Service) Tools() []worker.Tool { return s.tools }

// Build is the catalogue factory.
func Build(deps atlas.Deps) ([]worker.Tool, error) { return kit.Build(Open, deps) }

func logEvent(x *kit.Exec) (kit.Outcome, error) {
	var a struct {
		EventType string          `json:"event_type"`
		Data      json.RawMessage `json:"data"`
	}
	if err := x.Bind(&a); err != nil {
		return kit.Outcome{}, err
	}
	if len(a.Data) == 0 {
		a.Data = json.RawMessage("{}")
	}
	e := Event{EventID: x.ID("evt", 0), EventType: a.EventType, Data: a.Data, AgentTurnID: x.AgentTurnID, ToolCallID: x.ToolCallID, CreatedAt: x.Now()}
	b := x.Bucket(bucketEvents)
	if _, err := toolkit.PutNew(b, e.CreatedAt+"\x00"+e.EventID, e, x.ToolCallID); err != nil {
		return kit.Outcome{}, err
	}
	return kit.Outcome{Result: map[string]any{"logged": true, "event_id": e.EventID},
		Changes: []receipts.Change{{Op: "create", Kind: "event", ID: e.EventID, After: toolkit.Raw(e)}}}, nil
}

func notifyUser(x *kit.Exec) (kit.Outcome, error) {
	var a struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Actions []notify.Action `json:"actions"`
	}
	if err := x.Bind(&a); err != nil {
		return kit.Outcome{}, err
	}
	if a.Type == "" {
		a.Type = "info"
	}
	if a.Actions == nil {
		a.Actions = []notify.Action{}
	}
	n := notify.Notification{NotificationID: x.ID("ntf", 0), ProjectID: x.Project, ChannelID: x.Channel, Message: a.Message,
		Type: a.Type, Actions: a.Actions, CreatedAt: x.Now(),
		Source: notify.Source{ToolName: ToolNotifyUser, ToolCallID: x.ToolCallID, AgentTurnID: x.AgentTurnID}}
	b := x.Bucket(bucketNotes)
	if _, err := toolkit.PutNew(b, n.CreatedAt+"\x00"+n.NotificationID, n, x.ToolCallID); err != nil {
		return kit.Outcome{}, err
	}
	s, ver := x.Svc, x.Version
	return kit.Outcome{
		Result:  map[string]any{"notified": true, "notification_id": n.NotificationID},
		Changes: []receipts.Change{{Op: "create", Kind: "notification", ID: n.NotificationID, After: toolkit.Raw(n)}},
		After: func(ctx context.Context) error {
			nc, _, err := s.Deps().Conn(ctx)
			if err == nil {
				err = notify.Publish(ctx, nc, ver, n)
			}
			return err
		},
	}, nil
}

func notifyList(x *kit.Exec) (kit.Outcome, error) {
	var a struct {
		Limit int `json:"limit"`
	}
	if err := x.Bind(&a); err != nil {
		return kit.Outcome{}, err
	}
	if a.Limit == 0 {
		a.Limit = 50
	}
	out := []notify.Notification{}
	total := 0
	// Newest first (keys are created_at \x00 id); total counts them all.
	err := x.Bucket(bucketNotes).Scan("", true, func(_ string, v []byte) error {
		total++
		if len(out) == a.Limit {
			return nil
		}
		var n notify.Notification
		if err := json.Unmarshal(v, &n); err != nil {
			return err
		}
		out = append(out, n)
		return nil
	})
	if err != nil {
		return kit.Outcome{}, err
	}
	return kit.Outcome{Result: map[string]any{"notifications": out, "total": total}}, nil
}

// ConfirmResult is the result of ATLAS_CONFIRM and ATLAS_CANCEL: the
// convention's answer (Status OK or SKIPPED; FAILED ends the call failed)
// plus the executed action's undo step.
type ConfirmResult struct {
	confirm.Answer
	Undo *receipts.Undo `json:"undo,omitempty"`
}

func resolver(action string) func(ctx context.Context, x *kit.Exec) (kit.Outcome, error) {
	return func(ctx context.Context, x *kit.Exec) (kit.Outcome, error) {
		var a struct {
			ConfirmationID string `json:"confirmation_id"`
		}
		if err := x.Bind(&a); err != nil {
			return kit.Outcome{}, err
		}
		nc, _, err := x.Svc.Deps().Conn(ctx)
		if err != nil {
			return kit.Outcome{}, worker.Fail(card.CodeUpstreamUnavailable, err.Error())
		}
		r, err := kit.ResolveRemote(ctx, nc, x.Call, strings.TrimSpace(a.ConfirmationID), action)
		if err != nil {
			return kit.Outcome{}, err
		}
		if r.Status == receipts.StatusFailed {
			e := r.Error
			if e == nil {
				e = &card.Error{Code: card.CodeInternalError, Message: "the confirmed action failed"}
			}
			return kit.Outcome{}, worker.FailDetail(e.Code, r.ToolName+" (confirmed by "+r.ConfirmationID+") failed: "+e.Message,
				map[string]any{"status": receipts.StatusFailed, "confirmation_id": r.ConfirmationID, "tool_name": r.ToolName})
		}
		return kit.Outcome{Result: ConfirmResult{Answer: confirm.Answer{Status: r.Status, ConfirmationID: r.ConfirmationID, ToolName: r.ToolName, Result: r.Result}, Undo: r.Undo}}, nil
	}
}
