package svc_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// dropper is a real NATS subscriber standing for a service whose process
// took a request and died with it: it answers no request before the
// (drop+1)th, and then answers every copy it holds, the latest first
// (late answers to the earlier copies must not confuse the client).
type dropper struct {
	mu   sync.Mutex
	got  []*nats.Msg
	drop int
}

func (d *dropper) serve(m *nats.Msg) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got = append(d.got, m)
	if len(d.got) <= d.drop {
		return // taken, never answered
	}
	for i := len(d.got) - 1; i >= 0; i-- {
		r := nats.NewMsg(d.got[i].Reply)
		r.Data, _ = json.Marshal(map[string]int{"copy": i + 1})
		_ = d.got[i].RespondMsg(r)
	}
}

func (d *dropper) requests() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.got)
}

// TestResendIdempotentOps: the request of an op declared Read or Deduped
// is sent again when its attempt goes unanswered, and the client succeeds
// on a copy; a Once op (or one the table does not name) is sent exactly
// once and fails with ErrTimeout at its deadline; so does every op of an
// endpoint without an Ops table. Both the plain and the tool-scoped
// subjects (Send) follow the declaration.
func TestResendIdempotentOps(t *testing.T) {
	srv := meshtest.NATS(t)
	service := meshtest.Conn(t, srv)
	client := meshtest.Conn(t, srv)
	ops := svc.Ops{"get": svc.Read, "put": svc.Deduped, "append": svc.Once}
	for _, tc := range []struct {
		name   string
		op     string
		tool   bool // send on the op's tool-scoped subject
		noOps  bool // an endpoint without an Ops table
		resend bool
	}{
		{name: "read", op: "get", resend: true},
		{name: "deduped write", op: "put", resend: true},
		{name: "deduped write, tool-scoped", op: "put", tool: true, resend: true},
		{name: "once", op: "append"},
		{name: "once, tool-scoped", op: "append", tool: true},
		{name: "undeclared", op: "other"},
		{name: "no table", op: "get", noOps: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep, err := svc.NewClientEndpoint(client, "demo", codes, svc.WithAttempt(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.noOps {
				ep.Ops = ops
			}
			subject, err := svc.Subject(ep.Version, "p1", ep.Channel, "demo", tc.op)
			if tc.tool {
				subject, err = ep.ToolSubject("p1", tc.op, "echo")
			}
			if err != nil {
				t.Fatal(err)
			}
			d := &dropper{drop: 1}
			sub, err := service.Subscribe(subject, d.serve)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sub.Unsubscribe() }()
			if err := service.Flush(); err != nil {
				t.Fatal(err)
			}
			// A deadline far above the attempt: a resendable op gets its
			// copies in; a Once op waits it out.
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			var out struct {
				Copy int `json:"copy"`
			}
			if tc.tool {
				err = ep.Send(ctx, subject, false, map[string]string{"k": "v"}, &out)
			} else {
				err = ep.Call(ctx, "p1", tc.op, map[string]string{"k": "v"}, &out)
			}
			// Every copy the client sent has reached the subscriber once
			// both connections have flushed.
			if ferr := client.Flush(); ferr != nil {
				t.Fatal(ferr)
			}
			if ferr := service.Flush(); ferr != nil {
				t.Fatal(ferr)
			}
			n := d.requests()
			if tc.resend {
				if err != nil || out.Copy < 1 {
					t.Fatalf("%s, first request dropped: reply %+v, %v; want the answer to a copy", tc.op, out, err)
				}
				if n < 2 {
					t.Fatalf("%d requests reached the service, want the dropped one and a copy", n)
				}
				return
			}
			if !errors.Is(err, svc.ErrTimeout) {
				t.Fatalf("%s, request dropped: %v; want ErrTimeout", tc.op, err)
			}
			if n != 1 {
				t.Fatalf("%d requests of %s reached the service, want exactly 1 (it is not resent)", n, tc.op)
			}
		})
	}
}

// TestResendNoResponders: a resendable request that nothing serves fails
// at once with ErrUnavailable, as one sent once does.
func TestResendNoResponders(t *testing.T) {
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	ep, err := svc.NewClientEndpoint(nc, "nobody", codes, svc.WithAttempt(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ep.Ops = svc.Ops{"get": svc.Read}
	err = ep.Call(t.Context(), "p1", "get", struct{}{}, nil)
	if !errors.Is(err, svc.ErrUnavailable) {
		t.Fatalf("get with no service: %v; want ErrUnavailable", err)
	}
}

// TestWithAttempt refuses a non-positive attempt.
func TestWithAttempt(t *testing.T) {
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := svc.NewClientEndpoint(nc, "demo", codes, svc.WithAttempt(d)); err == nil {
			t.Errorf("WithAttempt(%v) accepted", d)
		}
	}
}

// TestCallResent: CallResent (the agent's dispatch) sends its request
// again after DefaultAttempt when the first copy goes unanswered, and
// returns the answer to a copy.
func TestCallResent(t *testing.T) {
	srv := meshtest.NATS(t)
	service := meshtest.Conn(t, srv)
	client := meshtest.Conn(t, srv)
	d := &dropper{drop: 1}
	sub, err := service.Subscribe("cg.v1.p1.main.svc.dispatch.call.a1", d.serve)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := service.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*svc.DefaultAttempt)
	defer cancel()
	var out struct {
		Copy int `json:"copy"`
	}
	if err := svc.CallResent(ctx, client, "cg.v1.p1.main.svc.dispatch.call.a1", codes, map[string]string{"k": "v"}, &out); err != nil || out.Copy < 1 {
		t.Fatalf("first request dropped: reply %+v, %v; want the answer to a copy", out, err)
	}
	if n := d.requests(); n < 2 {
		t.Fatalf("%d requests reached the service, want the dropped one and a copy", n)
	}
}
