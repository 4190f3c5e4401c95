package svc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

var errGone = errors.New("gone")

var codes = svc.Codes{{Err: errGone, Code: "gone"}}

type echoReq struct {
	Msg string `json:"msg"`
}

func TestCallRoundTripAndErrors(t *testing.T) {
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	s, err := svc.NewServer(nc, svc.Config{Service: "demo", Codes: codes, RequestTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Handle("echo", func(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
		var r echoReq
		if err := svc.Decode(data, &r); err != nil {
			return nil, err
		}
		return map[string]string{"msg": r.Msg, "project": sc.Project, "channel": sc.Channel}, nil
	}))
	must(t, s.Handle("fail", func(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
		return nil, svc.WithDetail(fmt.Errorf("thing %q: %w", "x", errGone), map[string]int{"n": 1})
	}))
	must(t, s.Handle("panic", func(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
		panic("boom")
	}))
	must(t, s.Handle("slow", func(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}))
	must(t, s.Start())
	ctx := context.Background()
	subj := func(op string) string {
		t.Helper()
		s, err := svc.Subject("v1r3", "p1", "c1", "demo", op)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	var out map[string]string
	must(t, svc.Call(ctx, nc, subj("echo"), codes, echoReq{Msg: "hi"}, &out))
	if out["msg"] != "hi" || out["project"] != "p1" || out["channel"] != "c1" {
		t.Fatalf("echo reply = %v", out)
	}

	err = svc.Call(ctx, nc, subj("fail"), codes, struct{}{}, nil)
	var re *svc.RemoteError
	if !errors.Is(err, errGone) || !errors.As(err, &re) || re.Code != "gone" || string(re.Detail) != `{"n":1}` {
		t.Fatalf("fail: err = %#v", err)
	}

	err = svc.Call(ctx, nc, subj("panic"), codes, struct{}{}, nil)
	if !errors.As(err, &re) || re.Code != svc.CodeInternal {
		t.Fatalf("panic: err = %v, want internal_error", err)
	}

	err = svc.Call(ctx, nc, subj("nope"), codes, struct{}{}, nil)
	if !errors.Is(err, svc.ErrBadRequest) || !strings.Contains(err.Error(), `no operation "nope"`) {
		t.Fatalf("unknown op: err = %v", err)
	}

	// A body that is not JSON is a bad request, not a crash.
	msg, err := nc.Request(subj("echo"), []byte("{nope"), time.Second)
	if err != nil || !strings.Contains(string(msg.Data), `"code":"bad_request"`) {
		t.Fatalf("malformed body: %v %s", err, msg.Data)
	}

	err = svc.Call(ctx, nc, subj("slow"), codes, struct{}{}, nil)
	if err == nil {
		t.Fatal("slow: want an error after the server's request timeout")
	}

	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	must(t, s.Stop(stopCtx))
	err = svc.Call(ctx, nc, subj("echo"), codes, echoReq{}, nil)
	if !errors.Is(err, svc.ErrUnavailable) || !strings.Contains(err.Error(), "utpmesh up") {
		t.Fatalf("after stop: err = %v, want ErrUnavailable", err)
	}
}

func TestConcurrentHandling(t *testing.T) {
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	s, err := svc.NewServer(nc, svc.Config{Service: "demo", Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	var inFlight, peak atomic.Int32
	release := make(chan struct{})
	must(t, s.Handle("wait", func(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		inFlight.Add(-1)
		return struct{}{}, nil
	}))
	must(t, s.Start())
	subj, _ := svc.Subject("v1r3", "p", "c", "demo", "wait")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- svc.Call(context.Background(), nc, subj, nil, struct{}{}, nil)
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for peak.Load() < 8 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := peak.Load(); got != 8 {
		t.Fatalf("peak concurrency = %d, want 8 requests handled at once", got)
	}
}

func TestCallRefusesOversizedRequest(t *testing.T) {
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	big := strings.Repeat("x", int(nc.MaxPayload())+1)
	err := svc.Call(context.Background(), nc, "cg.v1r3.p.c.svc.demo.x", nil, echoReq{Msg: big}, nil)
	if !errors.Is(err, svc.ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}

func TestNewServerValidates(t *testing.T) {
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	if _, err := svc.NewServer(nc, svc.Config{Service: "bad.name"}); err == nil {
		t.Fatal("want an error for a service name with a dot")
	}
	if _, err := svc.NewServer(nil, svc.Config{Service: "x"}); err == nil {
		t.Fatal("want an error for a nil connection")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// rawReply is a ReplyDecoder that keeps the reply's bytes.
type rawReply struct{ body string }

func (r *rawReply) DecodeReply(data []byte) error { r.body = string(data); return nil }

// TestEncodedReply checks that an Encoded reply goes out byte for byte
// and that a ReplyDecoder gets the reply's bytes instead of json.Unmarshal.
func TestEncodedReply(t *testing.T) {
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	s, err := svc.NewServer(nc, svc.Config{Service: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	const body = `{"cards":[ {"b":1,"a":2} ],"next":7}` // not what json.Marshal would write
	must(t, s.Handle("page", func(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
		return svc.Encoded(body), nil
	}))
	must(t, s.Start())
	subj, err := svc.Subject("v1r3", "p1", "c1", "demo", "page")
	if err != nil {
		t.Fatal(err)
	}
	var raw rawReply
	if err := svc.Call(context.Background(), nc, subj, nil, struct{}{}, &raw); err != nil || raw.body != body {
		t.Fatalf("ReplyDecoder got %q, %v; want %q", raw.body, err, body)
	}
	var decoded struct {
		Next int `json:"next"`
	}
	if err := svc.Call(context.Background(), nc, subj, nil, struct{}{}, &decoded); err != nil || decoded.Next != 7 {
		t.Fatalf("json reply: %+v, %v", decoded, err)
	}
}

// TestStopReturnsWithAStuckHandler: a handler that ignores its
// cancellation (a store call that never returns) does not keep Stop from
// returning once its deadline has passed; Stop says it abandoned it.
func TestStopReturnsWithAStuckHandler(t *testing.T) {
	nc := meshtest.Conn(t, meshtest.NATS(t))
	s, err := svc.NewServer(nc, svc.Config{Service: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	must(t, s.Handle("stuck", func(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
		close(entered)
		<-release // ignores ctx
		return struct{}{}, nil
	}))
	must(t, s.Start())
	subj, _ := svc.Subject("v1r3", "p", "c", "demo", "stuck")
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = svc.Call(ctx, nc, subj, nil, struct{}{}, nil)
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "abandoned") {
		t.Fatalf("Stop with a stuck handler = %v, want an error saying it abandoned it", err)
	}
}
