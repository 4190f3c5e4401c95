package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/telemetry"
	"github.com/utpmesh/utpmesh/subjects"
)

// OpReport is the svc operation through which a tool worker reports a
// result and waits for the inbox's answer: the same report body and headers
// as on cmd.sys.inbox.report, handled the same way, but answered once the
// entry is on disk instead of being stored in the command stream first.
// It saves the report's JetStream write (an fsync on the command stream's
// chain) on every call; see docs/protocol.md §8.
const OpReport = "report"

// CodeRefused is the wire code of ErrRefused.
const CodeRefused = "refused"

// ErrRefused: the report can never be accepted (no such tool.result card,
// a card of another call, a malformed body). Its dead-letter record is
// already published; sending it again changes nothing.
var ErrRefused = errors.New("inbox: report refused")

// ReportReply is the reply of the report operation.
type ReportReply struct {
	// InboxID is the call's entry, new or the one a duplicate found.
	InboxID string `json:"inbox_id"`
	// State is the entry's state after the report: pending, acked or
	// stale.
	State State `json:"state"`
}

// handleReportOp serves OpReport. The reply is sent only after the entry
// is durable and, when it is pending, its wakeup is stored by JetStream —
// exactly what the stream path waits for before its Ack.
func (s *Service) handleReportOp(ctx context.Context, scope svc.Scope, data []byte) (any, error) {
	h := svc.RequestHeader(ctx)
	if h == nil {
		h = nats.Header{}
	}
	sc, serr := svc.Subject(scope.Version, scope.Project, scope.Channel, ServiceName, OpReport)
	if serr != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, serr)
	}
	ctx, span := s.tr.Start(telemetry.Extract(ctx, h), telemetry.SpanWakeup, trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	log := s.log.With("subject", sc)
	e, err := s.process(ctx, log, svcReport{subject: sc, data: data, h: h}, subjects.KindService, "")
	var ref *refusal
	switch {
	case errors.As(err, &ref):
		return nil, fmt.Errorf("%w: %s (dead-lettered)", ErrRefused, ref.reason)
	case err != nil:
		s.observe(OutcomeRetried)
		return nil, fmt.Errorf("%w: %v", svc.ErrUnavailable, err)
	}
	return ReportReply{InboxID: e.InboxID, State: e.State}, nil
}

// svcReport adapts a svc request to report.
type svcReport struct {
	subject string
	data    []byte
	h       nats.Header
}

func (r svcReport) Subject() string      { return r.subject }
func (r svcReport) Data() []byte         { return r.data }
func (r svcReport) Headers() nats.Header { return r.h }
