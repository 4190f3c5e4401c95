package worker

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/utp"
)

// Tracer makes the spans of the calls a Runtime handles (Config.Tracer).
// The runtime keeps it free of any tracing library: every method takes the
// context that carries the span, and the types are the standard library's
// and nats.Header. pkg/telemetry's WorkerTracer implements it with
// OpenTelemetry.
//
// Without a Tracer the runtime traces nothing and passes the command's
// traceparent and tracestate headers on to the report unchanged.
type Tracer interface {
	// Extract returns ctx carrying the remote span that hdr's traceparent
	// and tracestate name (ctx unchanged when they are absent or invalid).
	Extract(ctx context.Context, hdr nats.Header) context.Context
	// Start starts span name (utp.SpanCommand, utp.SpanExecute, utp.SpanReport) as a
	// child of the span ctx carries; kv are attribute key/value pairs. It
	// returns ctx carrying the new span.
	Start(ctx context.Context, name string, kv ...string) context.Context
	// SetAttributes sets attributes (key/value pairs) on the span of ctx.
	SetAttributes(ctx context.Context, kv ...string)
	// SetError marks the span of ctx failed with err.
	SetError(ctx context.Context, err error)
	// End ends the span of ctx.
	End(ctx context.Context)
	// Inject writes the span of ctx into hdr as traceparent (and
	// tracestate); it writes nothing when ctx carries no valid span.
	Inject(ctx context.Context, hdr nats.Header)
}

// noTracer is the Tracer of a runtime without one: no spans, and nothing
// injected, so the report carries the command's trace headers as they came.
type noTracer struct{}

var _ Tracer = noTracer{}

func (noTracer) Extract(ctx context.Context, _ nats.Header) context.Context       { return ctx }
func (noTracer) Start(ctx context.Context, _ string, _ ...string) context.Context { return ctx }
func (noTracer) SetAttributes(context.Context, ...string)                         {}
func (noTracer) SetError(context.Context, error)                                  {}
func (noTracer) End(context.Context)                                              {}
func (noTracer) Inject(context.Context, nats.Header)                              {}

// traceHeader is the trace context of a command as headers: its
// traceparent (made when it had none) and tracestate.
func traceHeader(traceparent, tracestate string) nats.Header {
	h := nats.Header{utp.HeaderTraceparent: {traceparent}}
	if tracestate != "" {
		h[utp.HeaderTracestate] = []string{tracestate}
	}
	return h
}

// spanValues is ctx (its deadline, cancelation and values) that also
// carries the values of spans, which ctx lacks: the span of the command,
// so that a span started from it is the command span's child while the
// call's cancelation still applies.
type spanValues struct {
	context.Context
	spans context.Context
}

func (c spanValues) Value(key any) any {
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.spans.Value(key)
}
