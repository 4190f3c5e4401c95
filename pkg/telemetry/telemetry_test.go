package telemetry_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/utpmesh/utpmesh/pkg/telemetry"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestSetup(t *testing.T) {
	tests := []struct {
		name     string
		cfg      telemetry.Config
		enabled  bool
		endpoint string
		err      error
	}{
		{"off by default", telemetry.Config{Getenv: env(nil)}, false, "", nil},
		{"flag", telemetry.Config{Endpoint: "http://127.0.0.1:4318", Getenv: env(nil)}, true, "http://127.0.0.1:4318/v1/traces", nil},
		{"flag with path", telemetry.Config{Endpoint: "http://127.0.0.1:4318/otlp/v1/traces", Getenv: env(nil)}, true, "http://127.0.0.1:4318/otlp/v1/traces", nil},
		{"env", telemetry.Config{Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})}, true, "http://collector:4318", nil},
		{"traces env wins", telemetry.Config{Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/v1/traces"})}, true, "http://b:4318/v1/traces", nil},
		{"flag wins over env", telemetry.Config{Endpoint: "https://x:4318/", Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318"})}, true, "https://x:4318/v1/traces", nil},
		{"no scheme", telemetry.Config{Endpoint: "127.0.0.1:4318", Getenv: env(nil)}, false, "", telemetry.ErrBadEndpoint},
		{"grpc scheme", telemetry.Config{Endpoint: "grpc://x:4317", Getenv: env(nil)}, false, "", telemetry.ErrBadEndpoint},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := telemetry.Setup(context.Background(), tc.cfg)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("Setup = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Shutdown(context.Background())
			if p.Enabled() != tc.enabled || p.Endpoint != tc.endpoint {
				t.Fatalf("enabled=%v endpoint=%q, want %v %q", p.Enabled(), p.Endpoint, tc.enabled, tc.endpoint)
			}
		})
	}
}

// TestExport: with an endpoint, spans reach an OTLP/HTTP collector on
// Shutdown (which flushes).
func TestExport(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/traces" {
			hits.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	p, err := telemetry.Setup(context.Background(), telemetry.Config{Endpoint: srv.URL, ServiceName: "test", Getenv: env(nil)})
	if err != nil {
		t.Fatal(err)
	}
	_, span := telemetry.Tracer(p).Start(context.Background(), telemetry.SpanCommand)
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if hits.Load() == 0 {
		t.Fatal("no OTLP export reached the collector")
	}
}

func TestPropagation(t *testing.T) {
	tests := []struct {
		name, traceparent string
		valid             bool
	}{
		{"valid", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"unsampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"garbage", "nope", false},
		{"empty", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := telemetry.Extract(context.Background(), nats.Header{"traceparent": {tc.traceparent}})
			sc := trace.SpanContextFromContext(ctx)
			if sc.IsValid() != tc.valid {
				t.Fatalf("valid = %v, want %v", sc.IsValid(), tc.valid)
			}
			h := nats.Header{}
			telemetry.Inject(ctx, h)
			if tc.valid && h.Get("traceparent") != tc.traceparent {
				t.Fatalf("round trip = %q, want %q", h.Get("traceparent"), tc.traceparent)
			}
			if !tc.valid && len(h) != 0 {
				t.Fatalf("invalid context injected %v", h)
			}
			if got := telemetry.Traceparent(telemetry.ExtractTraceparent(context.Background(), tc.traceparent, "")); tc.valid && got != tc.traceparent {
				t.Fatalf("Traceparent = %q", got)
			}
		})
	}
}

func TestTracerNil(t *testing.T) {
	_, span := telemetry.Tracer(nil).Start(context.Background(), "x")
	defer span.End()
	if span.IsRecording() {
		t.Fatal("a nil provider must give a no-op tracer")
	}
}

// FuzzExtractTraceparent: any header value is either refused or round-trips
// unchanged in trace id.
func FuzzExtractTraceparent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "k=v")
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", ",,,")
	f.Fuzz(func(t *testing.T, tp, ts string) {
		ctx := telemetry.ExtractTraceparent(context.Background(), tp, ts)
		sc := trace.SpanContextFromContext(ctx)
		out := telemetry.Traceparent(ctx)
		if !sc.IsValid() {
			if out != "" {
				t.Fatalf("invalid context formatted as %q", out)
			}
			return
		}
		again := trace.SpanContextFromContext(telemetry.ExtractTraceparent(context.Background(), out, ""))
		if again.TraceID() != sc.TraceID() || again.SpanID() != sc.SpanID() {
			t.Fatalf("%q → %q does not round-trip", tp, out)
		}
	})
}
