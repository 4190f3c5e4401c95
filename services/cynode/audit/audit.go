// Package audit is the CyNodeAI gateway's audit trail: one Record per tool
// invocation, allowed or refused, published durably into the mesh's event
// stream on cg.<ver>.<project>.<channel>.evt.sys.cynode.audit, and read
// back by List (what `utpmesh audit ls` runs).
//
// A Record holds who called which tool in which task and how it ended; it
// never holds the call's arguments or its result (the seed's "never the
// payloads"): the fields are the ids the gateway resolved, not what the
// caller sent.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/subjects"
)

// Decisions and statuses of a Record.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
	StatusSuccess = "success"
	StatusError   = "error"
)

// ErrBadFilter: a List filter is unusable (its message says which field).
var ErrBadFilter = errors.New("cynode audit: bad filter")

// Record is one audited invocation. Empty strings mean "not applicable".
type Record struct {
	Time       time.Time `json:"time"`
	ProjectID  string    `json:"project_id"`
	ChannelID  string    `json:"channel_id"`
	TaskID     string    `json:"task_id,omitempty"`
	RunID      string    `json:"run_id,omitempty"`
	JobID      string    `json:"job_id,omitempty"`
	Subject    string    `json:"subject"`
	AgentType  string    `json:"agent_type,omitempty"`
	UserID     string    `json:"user_id,omitempty"`
	GroupIDs   []string  `json:"group_ids"`
	RoleNames  []string  `json:"role_names"`
	Tool       string    `json:"tool"`
	Server     string    `json:"server"`
	ToolCallID string    `json:"tool_call_id"`
	TurnID     string    `json:"agent_turn_id"`
	Decision   string    `json:"decision"`
	Status     string    `json:"status"`
	DurationMS int64     `json:"duration_ms"`
	ErrorType  string    `json:"error_type,omitempty"`
	// ChangesetHash is the sha256 of the changeset a git tool applied or
	// committed (hex).
	ChangesetHash string `json:"changeset_hash,omitempty"`
}

// Server is the Record.Server of every CyNodeAI tool.
const Server = "cynode"

// Subject is where the records of a project and channel are published.
func Subject(ver, project, channel string) (string, error) {
	s, err := subjects.Event(ver, project, channel, subjects.Sys, "cynode", "audit")
	if err != nil {
		return "", fmt.Errorf("cynode audit subject: %w", err)
	}
	return s.String(), nil
}

// Pattern matches the records of a project in every channel.
func Pattern(ver, project string) (string, error) {
	s, err := subjects.Event(ver, project, "CHANNEL", subjects.Sys, "cynode", "audit")
	if err != nil {
		return "", fmt.Errorf("cynode audit pattern: %w", err)
	}
	s.Channel = "*"
	return s.String(), nil
}

// Publisher publishes records into the event stream and waits for
// JetStream's acknowledgement.
type Publisher struct {
	JS jetstream.JetStream
}

// NewPublisher returns a Publisher on nc.
func NewPublisher(nc *nats.Conn) (*Publisher, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("cynode audit: %w", err)
	}
	return &Publisher{JS: js}, nil
}

// Publish stores rec durably.
func (p *Publisher) Publish(ctx context.Context, ver string, rec *Record) error {
	subj, err := Subject(ver, rec.ProjectID, rec.ChannelID)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("cynode audit: encode: %w", err)
	}
	if _, err := p.JS.Publish(ctx, subj, raw); err != nil {
		return fmt.Errorf("cynode audit: publish on %s: %w", subj, err)
	}
	return nil
}

// Filter selects records. Zero fields match everything.
type Filter struct {
	// Project is required.
	Project string
	Tool    string
	TaskID  string
	// Since: records at or after this time (the stream keeps events for
	// streams.EventMaxAge).
	Since time.Time
	// Limit bounds the answer (the newest Limit records); 0 means 1000.
	Limit int
}

// List reads the records matching f, oldest first.
func List(ctx context.Context, js jetstream.JetStream, ver string, f Filter) ([]Record, error) {
	if f.Project == "" {
		return nil, fmt.Errorf("%w: a project is required (--project P)", ErrBadFilter)
	}
	if f.Limit <= 0 {
		f.Limit = 1000
	}
	pat, err := Pattern(ver, f.Project)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadFilter, err)
	}
	stream, err := js.Stream(ctx, streams.EventStream(ver))
	if err != nil {
		return nil, fmt.Errorf("cynode audit: event stream %s: %w (is a mesh of protocol version %s running?)", streams.EventStream(ver), err, ver)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("cynode audit: event stream info: %w", err)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{pat}, DeliverPolicy: jetstream.DeliverAllPolicy}
	if !f.Since.IsZero() {
		since := f.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cynode audit: read %s: %w", pat, err)
	}
	last := info.State.LastSeq
	var out []Record
	for {
		if last == 0 {
			break
		}
		msgs, err := cons.FetchNoWait(256)
		if err != nil {
			return nil, fmt.Errorf("cynode audit: fetch: %w", err)
		}
		n := 0
		done := false
		for m := range msgs.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("cynode audit: metadata: %w", err)
			}
			var rec Record
			if err := json.Unmarshal(m.Data(), &rec); err == nil && match(f, &rec) {
				out = append(out, rec)
			}
			if md.Sequence.Stream >= last || md.NumPending == 0 {
				done = true
			}
		}
		if err := msgs.Error(); err != nil {
			return nil, fmt.Errorf("cynode audit: fetch: %w", err)
		}
		if done || n == 0 {
			break
		}
	}
	if len(out) > f.Limit {
		out = out[len(out)-f.Limit:]
	}
	return out, nil
}

func match(f Filter, r *Record) bool {
	if f.Tool != "" && r.Tool != f.Tool {
		return false
	}
	if f.TaskID != "" && r.TaskID != f.TaskID {
		return false
	}
	return f.Since.IsZero() || !r.Time.Before(f.Since)
}
