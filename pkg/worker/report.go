package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// publishTimeout bounds one JetStream publish (report, dead letter).
const publishTimeout = 10 * time.Second

// invalidResult begins the message of a call failed because the CardStore
// refused its result card as invalid.
const invalidResult = "the tool's result is not a valid card: "

// complete writes the tool.result card and reports it. If another worker
// already wrote this call's result, that result is reported instead: a
// call has exactly one result card. When the store says the write stored
// the call's inbox entry too (a single node, cardstore.EntryPutter), there
// is nothing to report: the command is acknowledged at once (stored).
func (j *job) complete(content card.ToolResultContent, callCard *card.Card) {
	// The result must be written even during shutdown: j.ctx is never
	// canceled; it only carries the trace.
	tr := j.r.tracer
	ctx := tr.Start(j.ctx, utp.SpanReport, j.spanAttrs(utp.AttrStatus, string(content.Status))...)
	defer tr.End(ctx)
	tr.SetAttributes(j.ctx, utp.AttrStatus, string(content.Status))
	rc, err := j.resultOf().Card(content, callCard)
	if err != nil {
		j.r.log.Error("encode tool result", append(j.logAttrs(), "err", err)...)
		_ = j.msg.NakWithDelay(transientDelay)
		return
	}
	res, existed, entry, err := writeResult(ctx, j.r.cfg.Store, rc)
	if errors.Is(err, cardstore.ErrTooLarge) {
		// Never lose the call over its size: a too-large result becomes a
		// failed one, and a too-large failure (a huge message or detail)
		// is cut to a short failure that always fits.
		tr.SetError(ctx, err)
		j.r.log.Warn("tool result too large for a card; failing the call instead", append(j.logAttrs(), "status", content.Status, "bytes", len(rc.Content), "err", err)...)
		small := card.NewResultContent(card.StatusFailed, content.AfterExecution, card.CodeInternalError,
			fmt.Sprintf("the tool's %s result (%d bytes) is too large for a card: %v", content.Status, len(rc.Content), err), nil)
		if content.Status == card.StatusFailed && content.Error != nil && len(content.Error.Message) <= 1024 && len(content.Error.Detail) == 0 {
			// Already small: this cannot be the reason. Keep retrying.
			j.retryLater("write tool.result card", err)
			return
		}
		j.complete(small, callCard)
		return
	}
	if errors.Is(err, cardstore.ErrInvalid) && (content.Error == nil || !strings.HasPrefix(content.Error.Message, invalidResult)) {
		// The tool's result is no valid card (invalid UTF-8 in a raw JSON
		// value or detail, say): a retry would rerun the tool for the same
		// refusal. The call fails instead, naming what the store refused.
		tr.SetError(ctx, err)
		j.r.log.Warn("tool result refused by the CardStore; failing the call instead", append(j.logAttrs(), "status", content.Status, "err", err)...)
		j.complete(card.NewResultContent(card.StatusFailed, content.AfterExecution, card.CodeInternalError, invalidResult+err.Error(), nil), callCard)
		return
	}
	if existed {
		if err != nil {
			j.retryLater("read the existing result", err)
			return
		}
		j.r.log.Warn("another worker already wrote this call's result; reporting that one", append(j.logAttrs(), "tool_result_card_id", res.CardID)...)
		j.reportExistingCtx(ctx, res)
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
	if entry {
		j.stored(rc)
		return
	}
	j.report(ctx, rc)
}

// stored acknowledges the command of a result whose inbox entry the
// store wrote in the result's commit: the entry is durable and its
// wakeup on its way (the inbox rings it, and rings again at its next
// start if this process dies first), so a report would only find a
// duplicate. As after a report, a plain Ack: a lost one is a redelivery,
// which finds the result and re-reports it.
func (j *job) stored(rc *card.Card) {
	if err := j.msg.Ack(); err != nil {
		j.r.log.Warn("ack after the result's entry was stored failed; the command may be redelivered", append(j.logAttrs(), "err", err)...)
	}
	j.r.log.Debug("result and inbox entry stored; no report needed", append(j.logAttrs(), "tool_result_card_id", rc.CardID)...)
}

// resultOf names the call this job answers, for its result card and
// report: routing from the command, the command's trace headers.
func (j *job) resultOf() ResultOf {
	h := j.msg.Headers()
	return ResultOf{
		Version: j.subj.Version, ProjectID: j.subj.Project, ChannelID: j.subj.Channel,
		AgentID: j.cmd.AgentID, AgentTurnID: j.cmd.AgentTurnID, TurnEpoch: j.cmd.TurnEpoch, ToolCallID: j.cmd.ToolCallID,
		StepID: j.cmd.StepID, ToolName: j.tool.Name, AuthorID: "tool." + j.tool.Name,
		Traceparent: j.trace, Tracestate: h.Get(utp.HeaderTracestate), RecursionDepth: h.Get(utp.HeaderRecursionDepth),
	}
}

// reportExisting re-reports a result card that already exists.
func (j *job) reportExisting(rc *card.Card) {
	ctx := j.r.tracer.Start(j.ctx, utp.SpanReport, j.spanAttrs()...)
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
	j.r.tracer.SetAttributes(ctx, utp.AttrStatus, string(tr.Status))
	j.report(ctx, rc)
}

// report hands the report of result card rc to the inbox and only then
// acknowledges the command: first as a svc request the inbox answers once
// its entry is on disk (reportDirect); when that gets no answer, durably
// through the command stream (JetStream, waiting for the stream's
// acknowledgement), where the inbox picks it up whenever it runs. spanCtx
// carries the utp.report span, whose context becomes the report's
// traceparent (the command's trace id; with no Tracer, exactly the
// command's traceparent).
func (j *job) report(spanCtx context.Context, rc *card.Card) {
	m, err := j.resultOf().Report(rc)
	if err != nil {
		j.r.log.Error("build report", append(j.logAttrs(), "err", err)...)
		_ = j.msg.Term()
		return
	}
	j.r.tracer.Inject(spanCtx, m.Header)
	if !j.reportDirect(spanCtx, m) {
		m.Header.Set(jetstream.MsgIDHeader, ReportMsgID(rc.CardID))
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
	j.r.log.Debug("reported", append(j.logAttrs(), "tool_result_card_id", rc.CardID)...)
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
	case errors.As(err, &re) && re.Code == inbox.CodeRefused:
		j.r.log.Error("the inbox refused the report and dead-lettered it", append(j.logAttrs(), "err", err)...)
		return true
	default:
		j.r.log.Debug("direct report not taken; storing it in the command stream", append(j.logAttrs(), "err", err)...)
		return false
	}
}

// directReportTimeout bounds the wait for the inbox's answer to a direct
// report before the report goes through the stream instead.
const directReportTimeout = 5 * time.Second

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
