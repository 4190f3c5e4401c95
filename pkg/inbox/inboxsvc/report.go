package inboxsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/telemetry"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// retryDelay is how long a report waits before redelivery after a
// transient failure (store unavailable, publish failed).
const retryDelay = time.Second

// DeadLetter is the record the inbox publishes on
// cg.<ver>.<project>.<channel>.evt.sys.deadletter.command for a report it
// refuses.
type DeadLetter struct {
	// Reason says, for a person, what is wrong with the report.
	Reason string `json:"reason"`
	// Subject is the report's subject.
	Subject string `json:"subject"`
	// Body is the report's body as a string, cut to inbox.MaxDeadLetterBody bytes.
	Body string `json:"body"`
	// ReceivedAt is when the inbox handled the report (UTC).
	ReceivedAt time.Time `json:"received_at"`
	// Source is "inbox".
	Source string `json:"source"`
	// The report's ids, when it could be read that far.
	AgentID     string `json:"agent_id,omitempty"`
	AgentTurnID string `json:"agent_turn_id,omitempty"`
	ToolCallID  string `json:"tool_call_id,omitempty"`
}

// Header values the inbox sets on what it publishes.
const (
	msgTypeWakeup     = "wakeup"
	msgTypeDeadLetter = "deadletter"
	sender            = "inbox"
)

// refusal is a permanent problem with a report: it is dead-lettered.
type refusal struct{ reason string }

func (r *refusal) Error() string { return r.reason }

func refuse(format string, args ...any) error { return &refusal{reason: fmt.Sprintf(format, args...)} }

// report is one report as it arrived: over the command stream (a
// jetstream.Msg) or as a svc request (a *nats.Msg).
type report interface {
	Subject() string
	Data() []byte
	Headers() nats.Header
}

// handleReport processes one report message from the command stream to its
// end: Ack (accepted or duplicate), Term (dead-lettered) or Nak (transient
// failure, retried).
func (s *Service) handleReport(m jetstream.Msg) {
	log := s.log.With("subject", m.Subject())
	defer func() {
		if r := recover(); r != nil {
			log.Error("inbox: report handler panic; the report will be redelivered", "panic", r, "stack", string(debug.Stack()))
			_ = m.NakWithDelay(retryDelay)
		}
	}()
	ctx, cancel := context.WithTimeout(s.baseCtx, s.cfg.AckWait)
	defer cancel()
	ctx, span := s.tr.Start(telemetry.Extract(ctx, m.Headers()), telemetry.SpanWakeup, trace.WithSpanKind(trace.SpanKindConsumer))
	defer span.End()

	dlID := ""
	if md, err := m.Metadata(); err == nil {
		// A redelivered refusal (Term lost) publishes the same record id.
		dlID = fmt.Sprintf("inbox-deadletter-%s-%d", md.Stream, md.Sequence.Stream)
	}
	_, err := s.process(ctx, log, m, subjects.KindInboxReport, dlID)
	var ref *refusal
	switch {
	case errors.As(err, &ref):
		if err := m.Term(); err != nil {
			log.Warn("inbox: cannot terminate the refused report; it will be redelivered and refused again", "err", err)
		}
	case err != nil:
		s.retry(m, span, err)
	default:
		// A plain Ack: the entry is durable, so an ack the server never
		// gets only causes a redelivery, which is recognised as a
		// duplicate. Waiting for the server's confirmation (DoubleAck)
		// would buy nothing but a round trip per report.
		if err := m.Ack(); err != nil {
			log.Warn("inbox: report ack not sent; a redelivery will be treated as a duplicate", "err", err)
		}
	}
}

// process takes one report from its subject to a durable entry and a
// published wakeup. kind is the subject kind the report must arrive on
// (a stream report or a svc request). It returns the entry, a *refusal when
// the report can never be accepted (already dead-lettered; a refusal whose
// record could not be published is returned as a transient error), or
// another error when it should be retried.
func (s *Service) process(ctx context.Context, log *slog.Logger, m report, kind subjects.Kind, dlID string) (*inbox.Entry, error) {
	span := trace.SpanFromContext(ctx)
	project, channel := "_", "_"
	sub, perr := subjects.Parse(m.Subject())
	ok := perr == nil && sub.Kind() == kind
	if ok {
		project, channel = sub.Project, sub.Channel
	}
	log = log.With("project_id", project, "channel_id", channel)
	if !ok {
		return nil, s.deadLetter(ctx, log, m, dlID, project, channel, nil, fmt.Sprintf("subject %q is not an inbox report subject", m.Subject()))
	}
	rep, err := utp.ParseReport(m.Data())
	if err == nil {
		err = checkLengths(rep)
	}
	if err != nil {
		partial := partialReport(m.Data())
		if partial != nil {
			log = log.With("agent_id", partial.AgentID, "agent_turn_id", partial.AgentTurnID, "tool_call_id", partial.ToolCallID, "tool_name", partial.ToolName)
		}
		return nil, s.deadLetter(ctx, log, m, dlID, project, channel, partial, err.Error())
	}
	log = log.With("agent_id", rep.AgentID, "agent_turn_id", rep.AgentTurnID, "tool_call_id", rep.ToolCallID,
		"tool_name", rep.ToolName, "turn_epoch", rep.TurnEpoch, "tool_result_card_id", rep.ToolResultCardID)
	span.SetAttributes(telemetry.AttrToolName.String(rep.ToolName), telemetry.AttrToolCallID.String(rep.ToolCallID),
		telemetry.AttrAgentTurnID.String(rep.AgentTurnID), telemetry.AttrProjectID.String(project),
		telemetry.AttrStatus.String(string(rep.Status)))

	resultCard, err := s.checkCard(ctx, project, rep)
	if err != nil {
		var ref *refusal
		if errors.As(err, &ref) {
			return nil, s.deadLetter(ctx, log, m, dlID, project, channel, rep, ref.reason)
		}
		log.Warn("inbox: cannot check the tool.result card; retrying", "err", err)
		return nil, err
	}

	traceparent := m.Headers().Get(utp.HeaderTraceparent)
	if traceparent == "" {
		traceparent = utp.NewTraceparent()
		log.Debug("inbox: report has no traceparent; made one", "traceparent", traceparent)
	}
	entry, created, err := s.st.Insert(ctx, project, channel, rep, traceparent)
	if err != nil {
		log.Warn("inbox: cannot store the entry; retrying", "err", err)
		return nil, err
	}
	log = log.With("inbox_id", entry.InboxID)
	if err := s.ring(ctx, log, m.Headers(), entry, created, resultCard.CreatedAt); err != nil {
		return nil, err
	}
	return entry, nil
}

// checkLengths bounds the free-form ids a report carries; they become bbolt
// keys and log fields.
func checkLengths(r *utp.Report) error {
	for _, f := range []struct{ name, v string }{
		{"tool_call_id", r.ToolCallID}, {"agent_turn_id", r.AgentTurnID},
		{"step_id", r.StepID}, {"tool_name", r.ToolName},
	} {
		if len(f.v) > card.MaxIDLen {
			return fmt.Errorf("%w: %s is longer than %d bytes", utp.ErrInvalidReport, f.name, card.MaxIDLen)
		}
	}
	return nil
}

// checkCard accepts the report only if its tool_result_card_id names a
// tool.result card of the project for the same call and turn, with the
// report's status, and returns that card. A *refusal is permanent; any
// other error is transient.
func (s *Service) checkCard(ctx context.Context, project string, rep *utp.Report) (*card.Card, error) {
	c, err := s.cfg.Store.Get(ctx, project, rep.ToolResultCardID)
	if errors.Is(err, cardstore.ErrNotFound) {
		return nil, refuse("tool_result_card_id %s: no such card in project %s", rep.ToolResultCardID, project)
	}
	if err != nil {
		return nil, fmt.Errorf("cardstore get %s: %w", rep.ToolResultCardID, err)
	}
	switch {
	case c.Type != card.TypeToolResult:
		return nil, refuse("tool_result_card_id %s: card is of type %q, not %q", rep.ToolResultCardID, c.Type, card.TypeToolResult)
	case c.ToolCallID != rep.ToolCallID:
		return nil, refuse("tool_result_card_id %s: card's tool_call_id %q differs from the report's %q", rep.ToolResultCardID, c.ToolCallID, rep.ToolCallID)
	case c.Metadata.AgentTurnID != rep.AgentTurnID:
		return nil, refuse("tool_result_card_id %s: card's metadata.agent_turn_id %q differs from the report's agent_turn_id %q",
			rep.ToolResultCardID, c.Metadata.AgentTurnID, rep.AgentTurnID)
	}
	// The report's status is copied into the entry and the wakeup, which
	// an agent may act on without reading the card: it must be the card's.
	tr, err := c.ToolResult()
	if err != nil {
		return nil, refuse("tool_result_card_id %s: %v", rep.ToolResultCardID, err)
	}
	if tr.Status != rep.Status {
		return nil, refuse("tool_result_card_id %s: card's content.status %q differs from the report's status %q",
			rep.ToolResultCardID, tr.Status, rep.Status)
	}
	return c, nil
}

// retry leaves the report for redelivery after a transient failure.
func (s *Service) retry(m jetstream.Msg, span trace.Span, err error) {
	span.SetStatus(codes.Error, err.Error())
	s.observe(OutcomeRetried)
	_ = m.NakWithDelay(retryDelay)
}

// publishWakeup publishes the entry's wakeup with JetStream and waits for
// the PubAck. Nats-Msg-Id makes a re-publish within the stream's duplicate
// window a no-op.
func (s *Service) publishWakeup(ctx context.Context, in nats.Header, e *inbox.Entry, rc json.RawMessage) error {
	subj, err := subjects.AgentWakeup(s.cfg.Version, e.ProjectID, e.ChannelID, e.AgentID)
	if err != nil {
		return fmt.Errorf("wakeup subject: %w", err)
	}
	body, err := json.Marshal(utp.Wakeup{
		AgentID: e.AgentID, InboxID: e.InboxID, Reason: utp.ReasonToolResult,
		AgentTurnID: e.AgentTurnID, TurnEpoch: e.TurnEpoch, ToolCallID: e.ToolCallID,
		ToolResultCardID: e.ToolResultCardID, Status: e.Status, AfterExecution: e.AfterExecution,
		StepID: e.StepID, ResultCard: rc,
	})
	if err != nil {
		return fmt.Errorf("encode wakeup: %w", err)
	}
	out := nats.NewMsg(subj.String())
	out.Data = body
	h := out.Header
	h.Set(utp.HeaderTraceparent, e.Traceparent)
	if in != nil {
		for _, k := range []string{utp.HeaderTracestate, utp.HeaderRecursionDepth} {
			if v := in.Get(k); v != "" {
				h.Set(k, v)
			}
		}
	}
	utp.CallHeaders{ProjectID: e.ProjectID, ChannelID: e.ChannelID, AgentID: e.AgentID, AgentTurnID: e.AgentTurnID,
		TurnEpoch: e.TurnEpoch, ToolCallID: e.ToolCallID, StepID: e.StepID}.Set(h)
	setEnvelope(h, msgTypeWakeup, s.cfg.Version)
	if _, err := s.js.PublishMsg(ctx, out, jetstream.WithMsgID("wakeup-"+e.InboxID)); err != nil {
		return fmt.Errorf("publish %s: %w", subj, err)
	}
	return nil
}

func setEnvelope(h nats.Header, msgType, ver string) {
	h.Set(utp.HeaderMsgType, msgType)
	h.Set(utp.HeaderVersion, ver)
	h.Set(utp.HeaderSender, sender)
	h.Set(utp.HeaderTimestamp, time.Now().UTC().Format(time.RFC3339Nano))
}

// partialReport reads what ids it can from a refused body, for the
// dead-letter record and the log.
func partialReport(data []byte) *utp.Report {
	var r utp.Report
	if json.Unmarshal(data, &r) != nil {
		var loose struct {
			AgentID     any `json:"agent_id"`
			AgentTurnID any `json:"agent_turn_id"`
			ToolCallID  any `json:"tool_call_id"`
		}
		if json.Unmarshal(data, &loose) != nil {
			return nil
		}
		str := func(v any) string { s, _ := v.(string); return s }
		r = utp.Report{AgentID: str(loose.AgentID), AgentTurnID: str(loose.AgentTurnID), ToolCallID: str(loose.ToolCallID)}
	}
	if len(r.AgentID) > card.MaxIDLen || len(r.AgentTurnID) > card.MaxIDLen || len(r.ToolCallID) > card.MaxIDLen {
		return nil
	}
	return &r
}

// deadLetter publishes the dead-letter record of a refused report and
// returns the refusal. log already carries the report's ids. When the
// record cannot be published the publish error is returned instead, so the
// report is retried: a refused report is never dropped silently. dlID, when
// set, is the record's Nats-Msg-Id, so a refusal handled twice publishes
// one record.
func (s *Service) deadLetter(ctx context.Context, log *slog.Logger, m report, dlID, project, channel string, rep *utp.Report, reason string) error {
	rec := DeadLetter{
		Reason: reason, Subject: m.Subject(), Body: truncateBody(m.Data()),
		ReceivedAt: time.Now().UTC(), Source: sender,
	}
	if rep != nil {
		rec.AgentID, rec.AgentTurnID, rec.ToolCallID = rep.AgentID, rep.AgentTurnID, rep.ToolCallID
	}
	log.Warn("inbox: report refused; dead-lettered", "reason", reason)
	if err := s.publishDeadLetter(ctx, m.Headers(), dlID, project, channel, &rec); err != nil {
		log.Warn("inbox: cannot publish the dead-letter record; retrying the report", "err", err)
		return err
	}
	s.observe(OutcomeRefused)
	return &refusal{reason: reason}
}

func (s *Service) publishDeadLetter(ctx context.Context, in nats.Header, dlID, project, channel string, rec *DeadLetter) error {
	subj, err := subjects.DeadLetter(s.cfg.Version, project, channel)
	if err != nil {
		return fmt.Errorf("dead-letter subject: %w", err)
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode dead-letter record: %w", err)
	}
	out := nats.NewMsg(subj.String())
	out.Data = body
	if tp := in.Get(utp.HeaderTraceparent); tp != "" {
		out.Header.Set(utp.HeaderTraceparent, tp)
	}
	setEnvelope(out.Header, msgTypeDeadLetter, s.cfg.Version)
	var opts []jetstream.PublishOpt
	if dlID != "" {
		opts = append(opts, jetstream.WithMsgID(dlID))
	}
	if _, err := s.js.PublishMsg(ctx, out, opts...); err != nil {
		return fmt.Errorf("publish %s: %w", subj, err)
	}
	return nil
}

func truncateBody(b []byte) string {
	if len(b) <= inbox.MaxDeadLetterBody {
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	return strings.ToValidUTF8(string(b[:inbox.MaxDeadLetterBody]), "\uFFFD")
}
