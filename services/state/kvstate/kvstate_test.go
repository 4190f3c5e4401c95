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
