package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox/inboxsvc"
	"github.com/utpmesh/utpmesh/pkg/metrics"
)

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body)
}

func TestServerExposesObservations(t *testing.T) {
	m := metrics.New("1.0.0-test")
	w, in, st := m.Worker(), m.Inbox(), m.CardStore()
	w.ExecuteStarted("echo")
	w.ExecuteFinished("echo", 3*time.Millisecond)
	w.Completed("echo", card.StatusSuccess, "", 5*time.Millisecond)
	w.Completed("echo", card.StatusFailed, card.CodeBadRequest, time.Millisecond)
	w.Redelivered("echo")
	w.ClaimTakenOver("echo")
	w.DeadLettered("")
	w.Poisoned("echo")
	in.ReportHandled(inboxsvc.OutcomeAccepted)
	in.WakeupSent(20 * time.Millisecond)
	in.WakeupSent(-time.Second) // clock skew: counted as 0
	st.Committed(4, 2*time.Millisecond)
	m.WatchPending(func() (int, error) { return 7, nil })

	srv, err := metrics.Serve(m, metrics.ServerConfig{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	body := scrape(t, srv.URL())
	for _, want := range []string{
		`utpmesh_build_info{version="1.0.0-test"} 1`,
		`utpmesh_worker_calls_total{code="",status="success",tool="echo"} 1`,
		`utpmesh_worker_calls_total{code="bad_request",status="failed",tool="echo"} 1`,
		`utpmesh_worker_call_duration_seconds_count{status="success",tool="echo"} 1`,
		`utpmesh_worker_execute_duration_seconds_count{tool="echo"} 1`,
		`utpmesh_worker_in_flight{tool="echo"} 0`,
		`utpmesh_worker_redeliveries_total{tool="echo"} 1`,
		`utpmesh_worker_claim_takeovers_total{tool="echo"} 1`,
		`utpmesh_worker_dead_letters_total{tool="_unknown"} 1`,
		`utpmesh_worker_poisoned_total{tool="echo"} 1`,
		`utpmesh_inbox_reports_total{outcome="accepted"} 1`,
		`utpmesh_inbox_wakeups_total 2`,
		`utpmesh_inbox_wakeup_lag_seconds_count 2`,
		`utpmesh_inbox_pending_entries 7`,
		`utpmesh_cardstore_commit_group_size_sum 4`,
		`utpmesh_cardstore_commit_duration_seconds_count 1`,
		`go_goroutines `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if got := scrape(t, "http://"+srv.Addr()+"/healthz"); got != "ok\n" {
		t.Errorf("/healthz = %q", got)
	}
}

func TestPendingUnreadable(t *testing.T) {
	m := metrics.New("x")
	m.WatchPending(func() (int, error) { return 0, errors.New("closed") })
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "utpmesh_inbox_pending_entries" {
			if v := mf.GetMetric()[0].GetGauge().GetValue(); v != -1 {
				t.Fatalf("unreadable pending = %v, want -1", v)
			}
			return
		}
	}
	t.Fatal("no utpmesh_inbox_pending_entries")
}

// TestCodeLabelsBounded: a tool service's own codes are kept up to
// MaxCodes distinct values; malformed or further codes become "other".
func TestCodeLabelsBounded(t *testing.T) {
	m := metrics.New("x")
	w := m.Worker()
	for i := range metrics.MaxCodes + 10 {
		w.Completed("t", card.StatusFailed, card.ErrorCode(fmt.Sprintf("code_%d", i)), time.Millisecond)
	}
	w.Completed("t", card.StatusFailed, "Not A Code!", time.Millisecond)
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "utpmesh_worker_calls_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "code" {
					codes[l.GetValue()] += mt.GetCounter().GetValue()
				}
			}
		}
	}
	if len(codes) != metrics.MaxCodes+1 || codes[metrics.OtherCode] != 11 {
		t.Fatalf("code labels: %d distinct, other=%v; want %d and 11", len(codes), codes[metrics.OtherCode], metrics.MaxCodes+1)
	}
}

func TestServeErrors(t *testing.T) {
	m := metrics.New("x")
	a, err := metrics.Serve(m, metrics.ServerConfig{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(context.Background())
	tests := []struct{ name, addr string }{
		{"port in use", a.Addr()},
		{"no port", "localhost"},
		{"bad port", "127.0.0.1:http2"},
	}
	for _, tc := range tests {
		if s, err := metrics.Serve(m, metrics.ServerConfig{Addr: tc.addr}); !errors.Is(err, metrics.ErrListen) {
			if s != nil {
				_ = s.Shutdown(context.Background())
			}
			t.Errorf("%s (%q): %v, want ErrListen", tc.name, tc.addr, err)
		}
	}
}

func TestHealthCheck(t *testing.T) {
	m := metrics.New("x")
	srv, err := metrics.Serve(m, metrics.ServerConfig{Addr: "127.0.0.1:0", Health: func() error { return errors.New("inbox stopped") }})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + srv.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/healthz with a failing check = %s", resp.Status)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + srv.Addr() + "/healthz"); err == nil {
		t.Fatal("server still answers after Shutdown")
	}
}

// TestReadiness: /readyz answers Ready's verdict (503 with its reason when
// not ready) apart from /healthz, and utpmesh_ready follows it.
func TestReadiness(t *testing.T) {
	var notReady atomic.Pointer[error]
	ready := func() error {
		if e := notReady.Load(); e != nil {
			return *e
		}
		return nil
	}
	m := metrics.New("x")
	srv, err := metrics.Serve(m, metrics.ServerConfig{Addr: "127.0.0.1:0", Ready: ready})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, tc := range []struct {
		name        string
		cause       error
		readyz      int
		body, gauge string
	}{
		{"ready", nil, http.StatusOK, "ready\n", "utpmesh_ready 1"},
		{"disk full", errors.New("embednats: not ready: disk full: 1 MiB free"), http.StatusServiceUnavailable, "disk full", "utpmesh_ready 0"},
		{"no quorum", errors.New("embednats: not ready: JetStream has not established contact with a meta leader"), http.StatusServiceUnavailable, "meta leader", "utpmesh_ready 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cause != nil {
				notReady.Store(&tc.cause)
			} else {
				notReady.Store(nil)
			}
			code, body := get("/readyz")
			if code != tc.readyz || !strings.Contains(body, tc.body) {
				t.Fatalf("/readyz = %d %q, want %d with %q", code, body, tc.readyz, tc.body)
			}
			if code, _ := get("/healthz"); code != http.StatusOK {
				t.Fatalf("/healthz = %d, want 200: liveness does not follow readiness", code)
			}
			if _, metricsBody := get("/metrics"); !strings.Contains(metricsBody, tc.gauge+"\n") {
				t.Fatalf("/metrics lacks %q", tc.gauge)
			}
		})
	}
}
