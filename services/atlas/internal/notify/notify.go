// Package notify publishes ATLAS user notifications on
// cg.<ver>.<project>.<channel>.evt.user.atlas.notify, where a UI subscribes
// (core NATS, or a consumer on the event stream cg_evt_<ver>, which keeps
// them 7 days). Each is published through JetStream with Nats-Msg-Id set to
// the notification id, so a re-publish within the stream's duplicate window
// (2 minutes) is dropped and a UI can de-duplicate later ones by id.
package notify

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/subjects"
)

// Action is a button a notification offers.
type Action struct {
	Label  string `json:"label"`
	Action string `json:"action"`
}

// Source says what sent a notification.
type Source struct {
	// ToolName and ToolCallID: a NOTIFY_USER call.
	ToolName   string `json:"tool_name,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	// AgentTurnID is the turn of the call.
	AgentTurnID string `json:"agent_turn_id,omitempty"`
	// WorkflowID and RunID: a workflow's notify action.
	WorkflowID string `json:"workflow_id,omitempty"`
	RunID      string `json:"run_id,omitempty"`
}

// Notification is the event payload (and what NOTIFY_LIST returns).
type Notification struct {
	NotificationID string   `json:"notification_id"`
	ProjectID      string   `json:"project_id"`
	ChannelID      string   `json:"channel_id"`
	Message        string   `json:"message"`
	Type           string   `json:"type"`
	Actions        []Action `json:"actions"`
	Source         Source   `json:"source"`
	CreatedAt      string   `json:"created_at"`
}

// Subject is the notification subject of a project and channel.
func Subject(ver, project, channel string) (string, error) {
	s, err := subjects.Event(ver, project, channel, subjects.User, "atlas", "notify")
	if err != nil {
		return "", err
	}
	return s.String(), nil
}

// Publish publishes n and waits for the event stream to store it.
func Publish(ctx context.Context, nc *nats.Conn, ver string, n Notification) error {
	subj, err := Subject(ver, n.ProjectID, n.ChannelID)
	if err != nil {
		return err
	}
	body, err := json.Marshal(n)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: body, Header: nats.Header{jetstream.MsgIDHeader: []string{n.NotificationID}}}); err != nil {
		return fmt.Errorf("notification %s was kept but not published on %s: %w", n.NotificationID, subj, err)
	}
	return nil
}
