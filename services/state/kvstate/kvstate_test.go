package kvstate_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
	"github.com/utpmesh/utpmesh/services/state/statetest"
)

func TestConformance(t *testing.T) {
	srv := meshtest.NATS(t)
	var n atomic.Int64
	statetest.Run(t, func(t *testing.T) (state.Store, state.Store) {
		// Two connections, as two worker processes have.
		cfg := kvstate.Config{Bucket: fmt.Sprintf("atlas_test%d", n.Add(1))}
		a, err := kvstate.Open(context.Background(), meshtest.Conn(t, srv), cfg)
		if err != nil {
			t.Fatal(err)
		}
		nc := meshtest.Conn(t, srv)
		b, err := kvstate.Open(context.Background(), nc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkStream(t, nc, cfg.Bucket, 1)
		return a, b
	})
}

// Bad configurations are refused with what to use instead.
func TestOpenRefusesBadConfig(t *testing.T) {
	nc := meshtest.Conn(t, meshtest.NATS(t))
	for _, tc := range []struct {
		cfg  kvstate.Config
		want string
	}{
		{kvstate.Config{}, "Bucket is required"},
		{kvstate.Config{Bucket: "atlas_x", Replicas: 7}, "use 1, or 3"},
		{kvstate.Config{Bucket: "atlas_x", Timeout: -time.Second}, "timeout -1s: use a positive duration"},
		{kvstate.Config{Bucket: "atlas_x", Replicas: 3}, "R3 needs a NATS cluster"}, // one server cannot hold three replicas
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := kvstate.Open(ctx, nc, tc.cfg)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}

// A commit that loses to another writer's re-runs the closure with fresh
// reads; after MaxAttempts losses Update fails with ErrConflict.
func TestConflictRetriesThenGivesUp(t *testing.T) {
	srv := meshtest.NATS(t)
	open := func(bucket string, attempts int) *kvstate.Store {
		s, err := kvstate.Open(context.Background(), meshtest.Conn(t, srv), kvstate.Config{Bucket: bucket, MaxAttempts: attempts})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ctx := context.Background()
	for _, tc := range []struct {
		attempts, runs int
		conflict       bool
	}{{1, 1, true}, {2, 2, false}} {
		bucket := fmt.Sprintf("atlas_conflict%d", tc.attempts)
		a, b := open(bucket, tc.attempts), open(bucket, tc.attempts)
		runs := 0
		err := a.Update(ctx, func(tx state.Tx) error {
			runs++
			v, _, err := tx.Bucket("p", "k").Get("n")
			if err != nil {
				return err
			}
			if runs == 1 { // another process commits in between
				if err := b.Update(ctx, func(tx state.Tx) error { return tx.Bucket("p", "k").Put("n", []byte("b")) }); err != nil {
					return err
				}
			}
			return tx.Bucket("p", "k").Put("n", append(v, 'a'))
		})
		if got := errors.Is(err, state.ErrConflict); got != tc.conflict || (!tc.conflict && err != nil) {
			t.Fatalf("MaxAttempts %d: err %v, want conflict %v", tc.attempts, err, tc.conflict)
		}
		if runs != tc.runs {
			t.Fatalf("MaxAttempts %d: closure ran %d times, want %d", tc.attempts, runs, tc.runs)
		}
		var final string
		_ = a.View(ctx, func(tx state.Tx) error { v, _, err := tx.Bucket("p", "k").Get("n"); final = string(v); return err })
		if want := map[bool]string{true: "b", false: "ba"}[tc.conflict]; final != want {
			t.Fatalf("MaxAttempts %d: n = %q, want %q (the loser's write must not land; the retry reads the winner's)", tc.attempts, final, want)
		}
	}
}

// A user allowed to publish to PublishSubjects only (and to receive on its
// inbox) can adopt the bucket the core created, write, read, scan and
// list; it creates no stream.
func TestPublishSubjectsSuffice(t *testing.T) {
	const bucket = "atlas_tasks"
	o := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "core", Password: "pw"}, {Username: "worker", Password: "pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: kvstate.PublishSubjects(bucket)},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}}}}}}
	srv, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server did not start")
	}
	denied := make(chan error, 16)
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("worker", "pw"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	core, err := nats.Connect(srv.ClientURL(), nats.UserInfo("core", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer core.Close()
	if _, err := kvstate.Open(ctx, core, kvstate.Config{Bucket: bucket}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // adopt, twice
		s, err := kvstate.Open(ctx, nc, kvstate.Config{Bucket: bucket})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Update(ctx, func(tx state.Tx) error {
			if err := tx.Bucket("demo", "tasks").Delete("gone"); err != nil {
				return err
			}
			return tx.Bucket("demo", "tasks").Put("task_1", []byte("x"))
		}); err != nil {
			t.Fatal(err)
		}
		var keys []string
		if err := s.View(ctx, func(tx state.Tx) error {
			keys = nil
			projects, err := tx.Projects()
			if err != nil || len(projects) != 1 {
				return fmt.Errorf("projects %v: %v", projects, err)
			}
			return tx.Bucket("demo", "tasks").Scan("", false, func(k string, _ []byte) error { keys = append(keys, k); return nil })
		}); err != nil {
			t.Fatal(err)
		}
		if len(keys) != 1 {
			t.Fatalf("keys = %v", keys)
		}
		// The state mode: recorded and read with the same subjects.
		if err := s.MarkShared(ctx); err != nil {
			t.Fatal(err)
		}
		if mode, err := kvstate.Mode(ctx, nc, bucket); err != nil || mode != state.ModeJetStream {
			t.Fatalf("mode = %q, %v", mode, err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-denied:
		t.Fatalf("a subject outside PublishSubjects was needed: %v", err)
	default:
	}
}

// The state mode a bucket records: none before, "jetstream" once a worker
// (or the core's Provision) marked it, kept by a second mark; a missing
// bucket reads as none and is not created.
func TestMode(t *testing.T) {
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	ctx := context.Background()
	if mode, err := kvstate.Mode(ctx, nc, "atlas_missing"); err != nil || mode != "" {
		t.Fatalf("mode of a missing bucket = %q, %v", mode, err)
	}
	s, err := kvstate.Open(ctx, nc, kvstate.Config{Bucket: "atlas_unmarked"})
	if err != nil {
		t.Fatal(err)
	}
	if mode, err := kvstate.Mode(ctx, nc, "atlas_unmarked"); err != nil || mode != "" {
		t.Fatalf("mode of an unmarked bucket = %q, %v", mode, err)
	}
	for range 2 {
		if err := s.MarkShared(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := kvstate.Provision(ctx, nc, kvstate.Config{Bucket: "atp_state"}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"atlas_unmarked", "atp_state"} {
		if mode, err := kvstate.Mode(ctx, nc, b); err != nil || mode != state.ModeJetStream {
			t.Fatalf("mode of %s = %q, %v", b, mode, err)
		}
	}
	// The mark is no project: Projects does not list it.
	if err := s.View(ctx, func(tx state.Tx) error {
		ps, err := tx.Projects()
		if err == nil && len(ps) != 0 {
			err = fmt.Errorf("projects = %v", ps)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := kvstate.Open(ctx, nc, kvstate.Config{Bucket: "atlas_missing2", Replicas: 0}); err != nil {
		t.Fatal(err)
	}
	checkStream(t, nc, "atlas_missing2", 1) // 0 replicas: a missing bucket is made R1
}

// Lazy opens on first use, runs its hook once, and refuses use after
// Close; a failed open is tried again on the next use.
func TestLazy(t *testing.T) {
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	ctx := context.Background()
	var resolved, hooked atomic.Int64
	fail := errors.New("not yet")
	l := kvstate.NewLazy(func(context.Context) (*nats.Conn, error) {
		if resolved.Add(1) == 1 {
			return nil, fail
		}
		return nc, nil
	}, kvstate.Config{Bucket: "atlas_lazy"}, func(ctx context.Context, s *kvstate.Store) error {
		hooked.Add(1)
		return s.MarkShared(ctx)
	})
	if resolved.Load() != 0 {
		t.Fatal("NewLazy resolved at once")
	}
	put := func() error {
		return l.Update(ctx, func(tx state.Tx) error { return tx.Bucket("p", "b").Put("k", []byte("v")) })
	}
	if err := put(); !errors.Is(err, fail) {
		t.Fatalf("first use = %v, want the resolver's error", err)
	}
	for range 2 {
		if err := put(); err != nil {
			t.Fatal(err)
		}
	}
	if resolved.Load() != 2 || hooked.Load() != 1 {
		t.Fatalf("resolved %d times, hook ran %d times; want 2 and 1", resolved.Load(), hooked.Load())
	}
	if mode, err := kvstate.Mode(ctx, nc, "atlas_lazy"); err != nil || mode != state.ModeJetStream {
		t.Fatalf("mode = %q, %v", mode, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.View(ctx, func(state.Tx) error { return nil }); !errors.Is(err, state.ErrClosed) {
		t.Fatalf("after Close = %v, want ErrClosed", err)
	}
}
