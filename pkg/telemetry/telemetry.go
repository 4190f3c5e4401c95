package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/utpmesh/utpmesh/pkg/utp"
)

// Errors of Setup.
var (
	// ErrBadEndpoint: the OTLP endpoint is not an http:// or https:// URL.
	ErrBadEndpoint = errors.New("telemetry: bad OTLP endpoint")
)

// Span names the mesh uses; see the package documentation.
const (
	SpanCommand = utp.SpanCommand
	SpanExecute = utp.SpanExecute
	SpanReport  = utp.SpanReport
	SpanWakeup  = utp.SpanWakeup
)

// Attribute keys of the mesh's spans.
const (
	AttrToolName    = attribute.Key(utp.AttrToolName)
	AttrToolCallID  = attribute.Key(utp.AttrToolCallID)
	AttrAgentTurnID = attribute.Key(utp.AttrAgentTurnID)
	AttrProjectID   = attribute.Key(utp.AttrProjectID)
	AttrStatus      = attribute.Key(utp.AttrStatus)
)

// InstrumentationName is the tracer name the mesh's packages use.
const InstrumentationName = "github.com/utpmesh/utpmesh"

// Config configures Setup.
type Config struct {
	// Endpoint is the OTLP/HTTP collector URL, e.g. http://127.0.0.1:4318
	// (Setup appends /v1/traces when the URL has no path). Empty
	// falls back to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, then
	// OTEL_EXPORTER_OTLP_ENDPOINT; when all are empty tracing is off.
	Endpoint string
	// ServiceName is the resource's service.name, e.g. "utpmesh-up".
	ServiceName string
	// ServiceVersion is the resource's service.version.
	ServiceVersion string
	// InstanceID is the resource's service.instance.id (optional).
	InstanceID string
	// Getenv reads the environment; default os.Getenv (tests replace it).
	Getenv func(string) string
}

// Provider is a configured TracerProvider and how to flush and stop it.
type Provider struct {
	trace.TracerProvider
	// Endpoint is where spans go; empty when tracing is off.
	Endpoint string
	shutdown func(context.Context) error
}

// Enabled reports whether spans are exported.
func (p *Provider) Enabled() bool { return p.Endpoint != "" }

// Shutdown flushes the spans not yet exported and stops the exporter. It is
// a no-op when tracing is off.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.shutdown == nil {
		return nil
	}
	if err := p.shutdown(ctx); err != nil {
		return fmt.Errorf("telemetry: shutdown: %w", err)
	}
	return nil
}

// Setup returns the process's TracerProvider: a no-op one unless an OTLP
// endpoint is configured (see Config.Endpoint). It does not install the
// provider globally; pass it to the packages that trace.
func Setup(ctx context.Context, cfg Config) (*Provider, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	endpoint := strings.TrimSpace(cfg.Endpoint)
	fromEnv := false
	if endpoint == "" {
		for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
			if v := strings.TrimSpace(getenv(k)); v != "" {
				endpoint, fromEnv = v, true
				break
			}
		}
	}
	if endpoint == "" {
		return &Provider{TracerProvider: noop.NewTracerProvider()}, nil
	}
	if err := checkEndpoint(endpoint); err != nil {
		return nil, err
	}
	var opts []otlptracehttp.Option
	if !fromEnv {
		// Like OTEL_EXPORTER_OTLP_ENDPOINT: a base URL gets /v1/traces.
		if u, _ := url.Parse(endpoint); u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
			endpoint = u.String()
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter for %s: %w", endpoint, err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", orDefault(cfg.ServiceName, "utpmesh"))}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.ServiceVersion))
	}
	if cfg.InstanceID != "" {
		attrs = append(attrs, attribute.String("service.instance.id", cfg.InstanceID))
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{TracerProvider: tp, Endpoint: endpoint, shutdown: tp.Shutdown}, nil
}

func checkEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: %q: use an http:// or https:// URL with a host, e.g. http://127.0.0.1:4318", ErrBadEndpoint, endpoint)
	}
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Tracer returns the mesh's tracer from tp; a nil tp gives a no-op tracer.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(InstrumentationName)
}

// Header adapts a nats.Header to propagation.TextMapCarrier. Keys are used
// as given (nats.Header is case-sensitive); the W3C propagator uses the
// lower-case traceparent and tracestate.
type Header nats.Header

var _ propagation.TextMapCarrier = Header(nil)

// Get returns the first value of key.
func (h Header) Get(key string) string { return nats.Header(h).Get(key) }

// Set sets key to value.
func (h Header) Set(key, value string) { nats.Header(h).Set(key, value) }

// Keys lists the keys present.
func (h Header) Keys() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}

var w3c = propagation.TraceContext{}

// Extract returns ctx carrying the remote span context of hdr's
// traceparent/tracestate (unchanged ctx when there is none or it is
// malformed).
func Extract(ctx context.Context, hdr nats.Header) context.Context {
	if hdr == nil {
		return ctx
	}
	return w3c.Extract(ctx, Header(hdr))
}

// ExtractTraceparent is Extract for a bare traceparent value.
func ExtractTraceparent(ctx context.Context, traceparent, tracestate string) context.Context {
	h := nats.Header{"traceparent": {traceparent}}
	if tracestate != "" {
		h["tracestate"] = []string{tracestate}
	}
	return w3c.Extract(ctx, Header(h))
}

// Inject writes the span context of ctx into hdr as traceparent (and
// tracestate when it has one). It writes nothing when ctx has no valid
// span context.
func Inject(ctx context.Context, hdr nats.Header) {
	if hdr == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	w3c.Inject(ctx, Header(hdr))
}

// Traceparent formats the span context of ctx as a W3C traceparent value,
// or returns "" when ctx has no valid span context.
func Traceparent(ctx context.Context) string {
	h := nats.Header{}
	Inject(ctx, h)
	return h.Get("traceparent")
}

// WorkerTracer makes the spans of a tool worker (pkg/worker's Tracer)
// with OpenTelemetry: utp.command is a consumer span, utp.report a
// producer span, any other an internal one. It keeps each span in the
// context Start returns.
type WorkerTracer struct {
	tracer trace.Tracer
}

// NewWorkerTracer returns the worker tracer of tp; a nil tp traces nothing
// (a no-op tracer, which passes the parent's span context on).
func NewWorkerTracer(tp trace.TracerProvider) *WorkerTracer {
	return &WorkerTracer{tracer: Tracer(tp)}
}

// Extract returns ctx carrying the remote span of hdr's traceparent and
// tracestate; see Extract.
func (w *WorkerTracer) Extract(ctx context.Context, hdr nats.Header) context.Context {
	return Extract(ctx, hdr)
}

// Start starts span name as a child of the span of ctx, with attributes kv
// (key/value pairs).
func (w *WorkerTracer) Start(ctx context.Context, name string, kv ...string) context.Context {
	kind := trace.SpanKindInternal
	switch name {
	case SpanCommand:
		kind = trace.SpanKindConsumer
	case SpanReport:
		kind = trace.SpanKindProducer
	}
	ctx, _ = w.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs(kv)...))
	return ctx
}

// SetAttributes sets attributes kv (key/value pairs) on the span of ctx.
func (w *WorkerTracer) SetAttributes(ctx context.Context, kv ...string) {
	trace.SpanFromContext(ctx).SetAttributes(attrs(kv)...)
}

// SetError marks the span of ctx failed with err's message.
func (w *WorkerTracer) SetError(ctx context.Context, err error) {
	if err != nil {
		trace.SpanFromContext(ctx).SetStatus(codes.Error, err.Error())
	}
}

// End ends the span of ctx.
func (w *WorkerTracer) End(ctx context.Context) { trace.SpanFromContext(ctx).End() }

// Inject writes the span of ctx into hdr; see Inject.
func (w *WorkerTracer) Inject(ctx context.Context, hdr nats.Header) { Inject(ctx, hdr) }

// attrs turns key/value pairs into string attributes (an odd last key is
// dropped).
func attrs(kv []string) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, attribute.String(kv[i], kv[i+1]))
	}
	return out
}
