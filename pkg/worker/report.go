package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// publishTimeout bounds one JetStream publish (report, dead letter).
const publishTimeout = 10 * time.Second

// complete writes the tool.result card and reports it. If another worker
// already wrote this call's result, that result is reported instead: a
// call has exactly one result card.
func (j *job) complete(content card.ToolResultContent, callCard *card.Card) {
	// The result must be written even during shutdown: j.ctx is never
	// canceled; it only carries the trace.
	tr := j.r.tracer
	ctx := tr.Start(j.ctx, SpanReport, j.spanAttrs(AttrStatus, string(content.Status))...)
	defer tr.End(ctx)
	tr.SetAttributes(j.ctx, AttrStatus, string(content.Status))
	raw, err := json.Marshal(content)
	if err != nil {
		j.r.log.Error("encode tool result", append(j.logAttrs(), "err", err)...)
		_ = j.msg.NakWithDelay(transientDelay)
		return
	}
	rc := j.resultCard(raw, callCard)
	err = j.r.cfg.Store.Put(ctx, rc)
	if errors.Is(err, cardstore.ErrTooLarge) {
		// Never lose the call over its size: a too-large result becomes a
		// failed one, and a too-large failure (a huge message or detail)
		// is cut to a short failure that always fits.
		tr.SetError(ctx, err)
		j.r.log.Warn("tool result too large for a card; failing the call instead", append(j.logAttrs(), "status", content.Status, "bytes", len(raw), "err", err)...)
		small := card.NewResultContent(card.StatusFailed, content.AfterExecution, card.CodeInternalError,
			fmt.Sprintf("the tool's %s result (%d bytes) is too large for a card: %v", content.Status, len(raw), err), nil)
		if content.Status == card.StatusFailed && content.Error != nil && len(content.Error.Message) <= 1024 && len(content.Error.Detail) == 0 {
			// Already small: this cannot be the reason. Keep retrying.
			j.retryLater("write tool.result card", err)
			return
		}
		j.complete(small, callCard)
		return
	}
	if errors.Is(err, cardstore.ErrResultExists) {
		existing, ferr := j.r.cfg.Store.FindToolResult(ctx, j.subj.Project, j.cmd.AgentTurnID, j.cmd.ToolCallID)
		if ferr != nil {
			j.retryLater("read the existing result", ferr)
			return
		}
		j.r.log.Warn("another worker already wrote this call's result; reporting that one", append(j.logAttrs(), "tool_result_card_id", existing.CardID)...)
		j.reportExistingCtx(ctx, existing)
		return
	}
	if err != nil {
		tr.SetError(ctx, err)
		j.retryLater("write tool.result card", err)
		return
	}
	var code card.ErrorCode
	if content.Error != nil && content.Status != card.StatusSuccess && content.Status != card.StatusPartial {
		code = content.Error.Code
	}
	j.r.onCompleted(j.tool.Name, content.Status, code, time.Since(j.start))
	j.report(ctx, rc.CardID, content.Status, content.AfterExecution, rc.Metadata.StepID)
}

// resultCard builds the tool.result card: routing metadata from the
// command, step_id/trace_id/parent_step_id copied verbatim from the tool.call
// card, function_name set to the tool.
func (j *job) resultCard(content json.RawMessage, callCard *card.Card) *card.Card {
	md := card.Metadata{
		AgentID: j.cmd.AgentID, AgentTurnID: j.cmd.AgentTurnID, TurnEpoch: j.cmd.TurnEpoch,
		StepID: j.cmd.StepID, ToolCallID: j.cmd.ToolCallID, FunctionName: j.tool.Name, Role: "tool",
		TraceID: utp.TraceID(j.trace),
	}
	if callCard != nil {
		if callCard.Metadata.StepID != "" {
			md.StepID = callCard.Metadata.StepID
		}
		if callCard.Metadata.TraceID != "" {
			md.TraceID = callCard.Metadata.TraceID
		}
		md.ParentStepID = callCard.Metadata.ParentStepID
	}
	return &card.Card{
		CardID: card.NewID(), ProjectID: j.subj.Project, Type: card.TypeToolResult,
		AuthorID: "tool." + j.tool.Name, Content: content, Metadata: md,
		ToolCallID: j.cmd.ToolCallID, CreatedAt: time.Now().UTC(),
	}
}

// reportExisting re-reports a result card that already exists.
func (j *job) reportExisting(rc *card.Card) {
	ctx := j.r.tracer.Start(j.ctx, SpanReport, j.spanAttrs()...)
	defer j.r.tracer.End(ctx)
	j.reportExistingCtx(ctx, rc)
}

// reportExistingCtx is reportExisting inside an open utp.report span.
func (j *job) reportExistingCtx(ctx context.Context, rc *card.Card) {
	tr, err := rc.ToolResult()
	if err != nil {
		j.r.log.Error("existing tool.result card is unreadable", append(j.logAttrs(), "tool_result_card_id", rc.CardID, "err", err)...)
		_ = j.msg.Term()
		return
	}
	j.r.tracer.SetAttributes(ctx, AttrStatus, string(tr.Status))
	j.report(ctx, rc.CardID, tr.Status, tr.AfterExecution, rc.Metadata.StepID)
}

// report hands the report to the inbox and only then acknowledges the
// command: first as a svc request the inbox answers once its entry is on
// disk (reportDirect); when that gets no answer, durably through the
// command stream (JetStream, waiting for the stream's acknowledgement),
// where the inbox picks it up whenever it runs. spanCtx carries
// the utp.report span, whose context becomes the report's traceparent (the
// command's trace id; with tracing off, exactly the command's traceparent).
func (j *job) report(spanCtx context.Context, resultID string, status card.Status, ae card.AfterExecution, stepID string) {
	rep := utp.Report{
		ToolCallID: j.cmd.ToolCallID, AgentTurnID: j.cmd.AgentTurnID, TurnEpoch: j.cmd.TurnEpoch,
		AgentID: j.cmd.AgentID, ToolResultCardID: resultID, Status: status, AfterExecution: ae,
		StepID: stepID, ToolName: j.tool.Name,
	}
	subj, err := subjects.InboxReport(j.subj.Version, j.subj.Project, j.subj.Channel)
	if err != nil {
		j.r.log.Error("build report subject", append(j.logAttrs(), "err", err)...)
		_ = j.msg.Term()
		return
	}
	body, _ := json.Marshal(rep)
	m := nats.NewMsg(subj.String())
	m.Data = body
	j.r.tracer.Inject(spanCtx, m.Header)
	if m.Header.Get(utp.HeaderTraceparent) == "" {
		m.Header.Set(utp.HeaderTraceparent, j.trace) // not W3C-valid: passed through as it came
	}
	if ts := j.msg.Headers().Get(utp.HeaderTracestate); ts != "" && m.Header.Get(utp.HeaderTracestate) == "" {
		m.Header.Set(utp.HeaderTracestate, ts)
	}
	setContextHeaders(m.Header, j.subj, j.cmd)
	if d := j.msg.Headers().Get(utp.HeaderRecursionDepth); d != "" {
		m.Header.Set(utp.HeaderRecursionDepth, d)
	}
	if !j.reportDirect(spanCtx, m) {
		m.Header.Set(jetstream.MsgIDHeader, "report-"+resultID)
		ctx, cancel := context.WithTimeout(spanCtx, publishTimeout)
		defer cancel()
		if _, err := j.r.js.PublishMsg(ctx, m); err != nil {
			j.r.tracer.SetError(spanCtx, err)
			j.retryLater("publish report", err)
			return
		}
	}
	// A plain Ack: the result card and the report are durable, so an ack
	// the server never gets only causes a redelivery, which finds the
	// result and re-reports it, and the inbox drops the duplicate. Waiting
	// for the server's confirmation (DoubleAck) bought a round trip per
	// call and nothing else.
	if err := j.msg.Ack(); err != nil {
		j.r.log.Warn("ack after report failed; the command may be redelivered", append(j.logAttrs(), "err", err)...)
	}
	j.r.log.Debug("reported", append(j.logAttrs(), "tool_result_card_id", resultID, "status", status, "after_execution", ae)...)
}

// reportDirect sends the report m as a request on svc.inbox.report and
// says whether the inbox took it: an entry is stored (new or duplicate), or
// the report was refused and dead-lettered (nothing to retry then). Any
// other outcome — no inbox, a timeout, the inbox failing — returns false
// and the caller stores the report in the stream instead, so a slow or
// absent inbox never loses a report and never blocks the worker for long.
func (j *job) reportDirect(ctx context.Context, m *nats.Msg) bool {
	subj, err := subjects.InboxReportRequest(j.subj.Version, j.subj.Project, j.subj.Channel)
	if err != nil {
		return false
	}
	req := nats.NewMsg(subj.String())
	req.Data, req.Header = m.Data, m.Header
	ctx, cancel := context.WithTimeout(ctx, directReportTimeout)
	defer cancel()
	var reply struct {
		InboxID string `json:"inbox_id"`
	}
	err = svc.CallMsg(ctx, j.r.nc, req, nil, &reply)
	var re *svc.RemoteError
	switch {
	case err == nil:
		return true
	case errors.As(err, &re) && re.Code == codeReportRefused:
		j.r.log.Error("the inbox refused the report and dead-lettered it", append(j.logAttrs(), "err", err)...)
		return true
	default:
		j.r.log.Debug("direct report not taken; storing it in the command stream", append(j.logAttrs(), "err", err)...)
		return false
	}
}

// codeReportRefused is the inbox's wire code for a report it refused
// (pkg/inbox.CodeRefused).
const codeReportRefused = "refused"

// directReportTimeout bounds the wait for the inbox's answer to a direct
// report before the report goes through the stream instead.
const directReportTimeout = 5 * time.Second

// setContextHeaders writes the CommonGround v1r4 identity headers.
func setContextHeaders(h nats.Header, s subjects.Subject, c *utp.Command) {
	h.Set(utp.HeaderProjectID, s.Project)
	h.Set(utp.HeaderChannelID, s.Channel)
	h.Set(utp.HeaderAgentID, c.AgentID)
	h.Set(utp.HeaderAgentTurnID, c.AgentTurnID)
	h.Set(utp.HeaderTurnEpoch, strconv.FormatInt(c.TurnEpoch, 10))
	h.Set(utp.HeaderToolCallID, c.ToolCallID)
	if c.StepID != "" {
		h.Set(utp.HeaderStepID, c.StepID)
	}
}

// DeadLetter is the record published on
// cg.<ver>.<project>.<channel>.evt.sys.deadletter.command for a command that
// could not even be answered with a failed result.
type DeadLetter struct {
	// Reason says what was wrong.
	Reason string `json:"reason"`
	// Field names the offending field, when one is to blame.
	Field string `json:"field,omitempty"`
	// Subject is the command's subject.
	Subject string `json:"subject"`
	// Body is the command's body (truncated to 4 KiB).
	Body string `json:"body"`
	// Source is the component that refused it ("worker:<tool>", "inbox").
	Source string `json:"source"`
	// ReceivedAt is when it was refused.
	ReceivedAt time.Time `json:"received_at"`
}

func (r *Runtime) deadLetter(msg jetstream.Msg, s subjects.Subject, tool, field, reason string) {
	src := "worker:" + tool
	r.log.Warn("command refused without a routable result: dead-lettered",
		"tool_name", tool, "subject", msg.Subject(), "field", field, "reason", reason)
	if r.tools[tool] != nil || r.pmo[tool] != nil {
		r.onDeadLetter(tool)
	} else {
		r.onDeadLetter("") // a name taken from the subject: keep labels bounded
	}
	body := msg.Data()
	if len(body) > 4096 {
		body = body[:4096]
	}
	rec, _ := json.Marshal(DeadLetter{Reason: reason, Field: field, Subject: msg.Subject(), Body: string(body), Source: src, ReceivedAt: time.Now().UTC()})
	project, channel := s.Project, s.Channel
	if project == "" {
		project, channel = "_", "_"
	}
	ver := s.Version
	if ver == "" {
		ver = r.cfg.ProtocolVersion
	}
	dl, err := subjects.DeadLetter(ver, project, channel)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
		defer cancel()
		_, err = r.js.Publish(ctx, dl.String(), rec)
	}
	if err != nil {
		r.log.Error("dead-letter publish failed; the command will be redelivered", "subject", msg.Subject(), "err", err)
		_ = msg.NakWithDelay(transientDelay)
		return
	}
	_ = msg.TermWithReason(fmt.Sprintf("dead-lettered: %s", reason))
}

func (r *Runtime) deadLetterUnknown(msg jetstream.Msg) {
	s, _ := subjects.Parse(msg.Subject())
	tool, _ := s.PMOTool()
	r.deadLetter(msg, s, tool, "tool_name", "no built-in tool is served on "+msg.Subject())
}
