package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore/boltstore"

	"github.com/utpmesh/utpmesh/internal/jskv/jskvtest"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/atp/hem"
	"github.com/utpmesh/utpmesh/services/atp/ratelimit"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// unknownOnce is ATP's state whose armed commit ends with
// state.ErrUnknownOutcome, as the replicated state's does when its commit
// request times out; stored says whether that commit was in fact stored.
type unknownOnce struct {
	state.Store
	stored bool
	armed  atomic.Bool
}

func (u *unknownOnce) Update(ctx context.Context, fn func(state.Tx) error) error {
	if u.armed.CompareAndSwap(true, false) {
		if u.stored {
			if err := u.Store.Update(ctx, fn); err != nil {
				return err
			}
		}
		return fmt.Errorf("%w: injected: commit timed out", state.ErrUnknownOutcome)
	}
	return u.Store.Update(ctx, fn)
}

// openOn opens the ATP service on the replicated state of nc (the bucket
// provisioned with replicas, as the mesh core does), its engine wrapped by
// wrap, with no HEM wake-ups and no rate limit in the way.
func openOn(t *testing.T, nc *nats.Conn, replicas int, wrap func(state.Store) state.Store) *Service {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kvstate.Provision(ctx, nc, kvstate.Config{Bucket: atp.StateBucket, Replicas: replicas}); err != nil {
		t.Fatal(err)
	}
	if err := ratelimit.Provision(ctx, nc, ratelimit.DefaultBucket, replicas); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cards, err := boltstore.Open(filepath.Join(dir, "cards.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cards.Close() })
	deps, err := atp.Deps{NC: nc, Cards: cards, DataDir: dir, State: atp.StateJetStream, StateReplicas: replicas, TickEvery: -1, Logger: quiet,
		RateLimits: func(string) ratelimit.Limits {
			return ratelimit.Limits{CallsPerMinute: 1 << 20, HEMPerHour: 1 << 20, NotificationsPerHour: 1 << 20}
		}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	engine, err := openState(deps)
	if err != nil {
		t.Fatal(err)
	}
	st := booking.New(wrap(engine), booking.Options{Now: deps.Now})
	t.Cleanup(func() { _ = st.Close() })
	s := &Service{deps: deps, store: st, done: make(chan struct{})}
	s.hem = hem.NewManager(st, hem.Default(), nil)
	return s
}

// handler is the handler of the service's tool name.
func handler(t *testing.T, s *Service, name string) worker.HandlerFunc {
	t.Helper()
	tools, err := s.Tools()
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools {
		if tl.Name == name {
			return tl.Handler
		}
	}
	t.Fatalf("no tool %s", name)
	return nil
}

// callOf is the worker call id of turn turn-1 with arguments args.
func callOf(tool, id string, args any) *worker.Call {
	raw, _ := json.Marshal(args)
	return &worker.Call{Version: "v1r3", ProjectID: "demo", ChannelID: "default", ToolName: tool,
		Command: utp.Command{AgentID: "agent", AgentTurnID: "turn-1", ToolCallID: id, TurnEpoch: 1}, Arguments: raw}
}

// resultJSON is a handler's result value as JSON.
func resultJSON(t *testing.T, r worker.Result) string {
	t.Helper()
	raw, err := json.Marshal(r.Value)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func countBookings(t *testing.T, s *Service) int {
	t.Helper()
	bs, err := s.store.List(context.Background(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	return len(bs)
}

// TestUnknownCommitOutcomeATP: a state-changing ATP call whose commit
// ends with an unknown outcome neither fails nor applies twice. The call
// is retried (worker.ErrRetryLater); the retry answers from the call
// record when the commit was stored and runs the call when it was not;
// a further redelivery answers the same bytes. Checked for a booking's
// creation (one booking), a transition (one event, where a second run
// would fail as an illegal transition), a safety check (one log entry),
// a HEM invocation and its confirmation. The same tool_call_id with
// other arguments fails bad_request.
func TestUnknownCommitOutcomeATP(t *testing.T) {
	nc := meshtest.Conn(t, meshtest.NATS(t))
	for _, stored := range []bool{true, false} {
		t.Run(fmt.Sprintf("stored=%v", stored), func(t *testing.T) {
			var inj *unknownOnce
			s := openOn(t, nc, 1, func(st state.Store) state.Store { inj = &unknownOnce{Store: st, stored: stored}; return inj })
			ctx := context.Background()
			prefix := fmt.Sprintf("stored-%v-", stored)
			// exactlyOnce makes call c with the commit's outcome unknown,
			// then redelivers it twice; it returns the answer.
			exactlyOnce := func(c *worker.Call) string {
				t.Helper()
				h := handler(t, s, c.ToolName)
				inj.armed.Store(true)
				if _, err := h(ctx, c); !errors.Is(err, worker.ErrRetryLater) {
					t.Fatalf("%s whose commit outcome is unknown = %v, want worker.ErrRetryLater", c.ToolName, err)
				}
				first, err := h(ctx, c)
				if err != nil {
					t.Fatalf("%s retried: %v", c.ToolName, err)
				}
				again, err := h(ctx, c)
				if err != nil || resultJSON(t, again) != resultJSON(t, first) {
					t.Fatalf("%s redelivered = %s, %v; want %s", c.ToolName, resultJSON(t, again), err, resultJSON(t, first))
				}
				return resultJSON(t, first)
			}

			before := countBookings(t, s)
			out := exactlyOnce(callOf(ToolBookingCreate, prefix+"create", map[string]any{"advance_to": "CONFIRMED",
				"booking": map[string]any{"title": "exactly once", "participants": []any{map[string]any{"participant_id": "p1", "name": "P"}}}}))
			if n := countBookings(t, s); n != before+1 {
				t.Fatalf("bookings after one create = %d, want %d", n, before+1)
			}
			var b struct {
				ID    string `json:"booking_object_id"`
				State string `json:"state"`
			}
			if err := json.Unmarshal([]byte(out), &b); err != nil || b.ID == "" || b.State != "CONFIRMED" {
				t.Fatalf("create answered %s (%v), want a CONFIRMED booking", out, err)
			}
			got, err := s.store.Get(ctx, "demo", b.ID)
			if err != nil || got.EventCount != 3 {
				t.Fatalf("created booking: %v, %d events; want 3 (created, 2 transitions)", err, got.EventCount)
			}

			exactlyOnce(callOf(ToolBookingTransition, prefix+"transition", map[string]any{"booking_object_id": b.ID, "to": "IN_JOURNEY"}))
			exactlyOnce(callOf(ToolRecordSafetyCheck, prefix+"check", map[string]any{"booking_object_id": b.ID, "check_type": "EQUIPMENT_FIT",
				"subject": "p1", "outcome": "PASS", "checked_by": "guide"}))
			got, _ = s.store.Get(ctx, "demo", b.ID)
			if got.EventCount != 5 {
				t.Fatalf("events after one transition and one safety check = %d, want 5", got.EventCount)
			}

			inv := exactlyOnce(callOf(ToolInvokeHEM, prefix+"hem", map[string]any{"booking_object_id": b.ID, "hem_id": "HEM-MANDATE-01",
				"context": map[string]any{"trigger_reason": "MANDATE_GAP_DETECTED", "agent_assessment": "needs a human"}}))
			var task struct {
				ID string `json:"task_id"`
			}
			if err := json.Unmarshal([]byte(inv), &task); err != nil || task.ID == "" {
				t.Fatalf("invoke answered %s", inv)
			}
			tk, err := s.hem.Get(ctx, "demo", task.ID)
			if err != nil {
				t.Fatal(err)
			}
			confirm := callOf(ToolHEMConfirm, prefix+"confirm", map[string]any{"task_id": task.ID, "human_confirmation_token": tk.Token})
			confirm.Principal = utp.PrincipalOperator + ":ops"
			confirm.Admission = &utp.Admission{Principal: confirm.Principal}
			if out := exactlyOnce(confirm); !json.Valid([]byte(out)) {
				t.Fatalf("confirm answered %s", out)
			}
			got, _ = s.store.Get(ctx, "demo", b.ID)
			if got.EventCount != 7 || len(got.ActiveHEM) != 0 {
				t.Fatalf("after one invoke and one confirm: %d events, active HEM %v; want 7, none", got.EventCount, got.ActiveHEM)
			}

			// The id again with other arguments: refused, naming the reuse.
			_, err = handler(t, s, ToolBookingTransition)(ctx, callOf(ToolBookingTransition, prefix+"transition", map[string]any{"booking_object_id": b.ID, "to": "COMPLETION"}))
			var ce *card.Error
			if !errors.As(err, &ce) || ce.Code != card.CodeBadRequest {
				t.Fatalf("tool_call_id reused with other arguments = %v, want bad_request", err)
			}
		})
	}
}

// killBeforeCommit is ATP's state whose armed write transaction, once its
// closure has read and written, calls kill before the commit.
type killBeforeCommit struct {
	state.Store
	armed atomic.Bool
	kill  func()
}

func (k *killBeforeCommit) Update(ctx context.Context, fn func(state.Tx) error) error {
	return k.Store.Update(ctx, func(tx state.Tx) error {
		err := fn(tx)
		if err == nil && k.armed.CompareAndSwap(true, false) {
			k.kill()
		}
		return err
	})
}

// TestFollowerKillExactlyOnceATP: atp_booking_create calls on the
// replicated (R3) state while a follower of its bucket is killed — the
// node the service's connection is on, so the connection fails over too,
// between one call's reads and its commit — each end with the one answer
// of their call: a call is retried (worker.ErrRetryLater, as the worker
// would redeliver it) but never fails for the loss, and every call
// created exactly one booking (n calls, n bookings, every answered id
// among them).
func TestFollowerKillExactlyOnceATP(t *testing.T) {
	c := jskvtest.Start(t)
	var urls []string
	for _, s := range c.Servers {
		urls = append(urls, s.ClientURL())
	}
	ctx := context.Background()
	boot := c.Conn(t, 0)
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := kvstate.Provision(pctx, boot, kvstate.Config{Bucket: atp.StateBucket, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(boot)
	if err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(pctx, "KV_"+atp.StateBucket)
	if err != nil {
		t.Fatal(err)
	}
	leader := info.CachedInfo().Cluster.Leader
	var nc *nats.Conn
	for _, srv := range c.Servers {
		if srv.Name() == leader {
			continue
		}
		order := []string{srv.ClientURL()}
		for _, u := range urls {
			if u != srv.ClientURL() {
				order = append(order, u)
			}
		}
		if nc, err = nats.Connect(strings.Join(order, ","), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		break
	}
	killed := -1
	kb := &killBeforeCommit{kill: func() {
		for j, srv := range c.Servers {
			if srv.Name() == nc.ConnectedServerName() {
				killed = j
			}
		}
		c.Servers[killed].Shutdown()
	}}
	s := openOn(t, nc, 3, func(st state.Store) state.Store { kb.Store = st; return kb })
	create := handler(t, s, ToolBookingCreate)
	const n = 40
	retries := 0
	ids := map[string]bool{}
	for i := range n {
		call := callOf(ToolBookingCreate, fmt.Sprintf("call-%d", i), map[string]any{"booking": map[string]any{"title": fmt.Sprintf("b%d", i)}})
		if i == n/4 {
			kb.armed.Store(true)
		}
		for attempt := 0; ; attempt++ {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			res, err := create(cctx, call)
			cancel()
			if errors.Is(err, worker.ErrRetryLater) && attempt < 100 {
				retries++
				time.Sleep(100 * time.Millisecond) // the worker's redelivery delay, shortened
				continue
			}
			if err != nil {
				t.Fatalf("call %d (attempt %d) failed: %v", i, attempt, err)
			}
			var b struct {
				ID string `json:"booking_object_id"`
			}
			if err := json.Unmarshal([]byte(resultJSON(t, res)), &b); err != nil || b.ID == "" || ids[b.ID] {
				t.Fatalf("call %d answered %s: want a booking of its own", i, resultJSON(t, res))
			}
			ids[b.ID] = true
			break
		}
	}
	if killed < 0 {
		t.Fatal("no node was killed")
	}
	bs, err := s.store.List(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if !ids[b.ID] {
			t.Errorf("booking %s (%s) was created by no answered call", b.ID, b.Title)
		}
	}
	if len(bs) != n {
		t.Fatalf("bookings after %d calls with a follower killed = %d, want %d", n, len(bs), n)
	}
	t.Logf("killed node %d (a follower, the connection's node); %d retries; %d calls, %d bookings", killed, retries, n, len(bs))
}
