package inboxsvc

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/telemetry"
	"github.com/utpmesh/utpmesh/subjects"
)

// handleReportOp serves inbox.OpReport. It saves the report's JetStream
// write (an fsync on the command stream's chain) on every call; see
// docs/protocol.md §8. The reply is sent only after the entry
// is durable and, when it is pending, its wakeup is stored by JetStream —
// exactly what the stream path waits for before its Ack.
func (s *Service) handleReportOp(ctx context.Context, scope svc.Scope, data []byte) (any, error) {
	h := svc.RequestHeader(ctx)
	if h == nil {
		h = nats.Header{}
	}
	sc, serr := svc.Subject(scope.Version, scope.Project, scope.Channel, inbox.ServiceName, inbox.OpReport)
	if serr != nil {
		return nil, fmt.Errorf("%w: %v", inbox.ErrInvalid, serr)
	}
	ctx, span := s.tr.Start(telemetry.Extract(ctx, h), telemetry.SpanWakeup, trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	log := s.log.With("subject", sc)
	e, err := s.process(ctx, log, svcReport{subject: sc, data: data, h: h}, subjects.KindService, "")
	var ref *refusal
	switch {
	case errors.As(err, &ref):
		return nil, fmt.Errorf("%w: %s (dead-lettered)", inbox.ErrRefused, ref.reason)
	case err != nil:
		s.observe(OutcomeRetried)
		return nil, fmt.Errorf("%w: %v", svc.ErrUnavailable, err)
	}
	return inbox.ReportReply{InboxID: e.InboxID, State: e.State}, nil
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
