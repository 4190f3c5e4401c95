package jsstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/jsstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// resendWrite is one kind of write whose attempts a test disturbs: setup
// runs undisturbed, write is the write under test, check asserts it is
// stored exactly once.
type resendWrite struct {
	name  string
	batch bool // an atomic batch (a Put), else a single record
	setup func(t *testing.T, s *jsstore.Store)
	write func(ctx context.Context, s *jsstore.Store) error
	check func(t *testing.T, s *jsstore.Store)
}

const resendProject = "proj-resend"

// resendWrites are a Put (call and result: one batch), a Claim, a Release
// and a box append (single records).
func resendWrites() []resendWrite {
	call := storetest.ToolCallCard(resendProject, "turn-1", "call-1")
	result := storetest.ToolResultCard(resendProject, "turn-1", "call-1", card.StatusSuccess)
	note := storetest.NoteCard(resendProject, "turn-2", "in a box")
	claim := cardstore.ClaimRequest{ProjectID: resendProject, Key: "key-1", Holder: "worker-1", Lease: time.Minute}
	return []resendWrite{
		{
			name: "put", batch: true,
			write: func(ctx context.Context, s *jsstore.Store) error { return s.Put(ctx, call, result) },
			check: func(t *testing.T, s *jsstore.Store) {
				all, err := cardstore.AllTurn(t.Context(), s, resendProject, "turn-1")
				if err != nil || !slices.Equal(ids(all), []string{call.CardID, result.CardID}) {
					t.Fatalf("turn-1 holds %v, %v; want its call and its result once each", ids(all), err)
				}
				turns := listTurns(t, s, resendProject)
				if len(turns) != 1 || turns[0].Cards != 2 || turns[0].ToolResults != 1 {
					t.Fatalf("turns listed: %+v; want turn-1 once, with 2 cards and 1 result", turns)
				}
				got, err := s.FindToolResult(t.Context(), resendProject, "turn-1", "call-1")
				if err != nil || got.CardID != result.CardID {
					t.Fatalf("result of call-1: %v, %v", got, err)
				}
			},
		},
		{
			name:  "claim",
			write: func(ctx context.Context, s *jsstore.Store) error { _, err := s.Claim(ctx, claim); return err },
			check: func(t *testing.T, s *jsstore.Store) {
				c, err := s.GetClaim(t.Context(), resendProject, claim.Key)
				if err != nil || c.Holder != claim.Holder || c.Token != 1 {
					t.Fatalf("claim after the write: %+v, %v; want worker-1's with token 1", c, err)
				}
			},
		},
		{
			name: "release",
			setup: func(t *testing.T, s *jsstore.Store) {
				if _, err := s.Claim(t.Context(), claim); err != nil {
					t.Fatal(err)
				}
			},
			write: func(ctx context.Context, s *jsstore.Store) error {
				return s.Release(ctx, resendProject, claim.Key, claim.Holder)
			},
			check: func(t *testing.T, s *jsstore.Store) {
				if c, err := s.GetClaim(t.Context(), resendProject, claim.Key); !errors.Is(err, cardstore.ErrNotFound) {
					t.Fatalf("claim after its release: %+v, %v; want not found", c, err)
				}
			},
		},
		{
			name: "box append",
			setup: func(t *testing.T, s *jsstore.Store) {
				if err := s.Put(t.Context(), call, note); err != nil {
					t.Fatal(err)
				}
				if _, err := s.CreateBox(t.Context(), resendProject, "box-1", []string{call.CardID}); err != nil {
					t.Fatal(err)
				}
			},
			write: func(ctx context.Context, s *jsstore.Store) error {
				_, err := s.AppendBox(ctx, resendProject, "box-1", []string{note.CardID})
				return err
			},
			check: func(t *testing.T, s *jsstore.Store) {
				b, err := s.GetBox(t.Context(), resendProject, "box-1")
				if err != nil || !slices.Equal(b.CardIDs, []string{call.CardID, note.CardID}) {
					t.Fatalf("box after the append: %+v, %v; want the note appended once", b, err)
				}
			},
		},
	}
}

// TestResendLostAck: a write whose acknowledgement is lost was stored; the
// store sends it again after AttemptTimeout, finds the copy refused (its
// compare-and-set sees the first), reads back what is stored, and the
// caller gets success with the write stored exactly once.
func TestResendLostAck(t *testing.T) {
	ns := startServer(t, "")
	nc := connect(t, ns)
	for _, w := range resendWrites() {
		t.Run(w.name, func(t *testing.T) {
			s := open(t, nc, jsstore.Config{AttemptTimeout: 200 * time.Millisecond})
			if w.setup != nil {
				w.setup(t, s)
			}
			var armed atomic.Bool
			var dropped atomic.Int64
			jsstore.SetDropAck(s, func([]*nats.Msg) bool {
				if armed.CompareAndSwap(true, false) {
					dropped.Add(1)
					return true
				}
				return false
			})
			armed.Store(true)
			if err := w.write(t.Context(), s); err != nil {
				t.Fatalf("write whose first acknowledgement was lost: %v", err)
			}
			if dropped.Load() != 1 {
				t.Fatalf("%d acknowledgements dropped, want 1: the test proves nothing", dropped.Load())
			}
			w.check(t, s)
		})
	}
}

// TestResendUnknownUntilDeadline: when no attempt after the first is
// answered before the write's bound ends, the store reads back what it
// did: stored (the first attempt's acknowledgement was lost) is a
// success; not stored is an error that wraps ErrUnavailable and says the
// outcome is unknown, and the write repeated then stores it once.
func TestResendUnknownUntilDeadline(t *testing.T) {
	ns := startServer(t, "")
	nc := connect(t, ns)
	cfg := jsstore.Config{AttemptTimeout: 100 * time.Millisecond, RequestTimeout: 500 * time.Millisecond}
	for _, w := range resendWrites() {
		t.Run(w.name+"/stored", func(t *testing.T) {
			s := open(t, nc, cfg)
			if w.setup != nil {
				w.setup(t, s)
			}
			var first, stall atomic.Bool
			jsstore.SetDropAck(s, func([]*nats.Msg) bool {
				if first.CompareAndSwap(true, false) {
					stall.Store(true) // every later attempt goes unanswered
					return true
				}
				return false
			})
			jsstore.SetBeforeCommit(s, func(ctx context.Context, _ []*nats.Msg) error {
				if stall.Load() {
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			})
			first.Store(true)
			if err := w.write(t.Context(), s); err != nil {
				t.Fatalf("write stored by its first attempt, then unanswered until its deadline: %v", err)
			}
			if !stall.Load() {
				t.Fatal("no acknowledgement was dropped: the test proves nothing")
			}
			stall.Store(false)
			w.check(t, s)
		})
		t.Run(w.name+"/not-stored", func(t *testing.T) {
			s := open(t, nc, cfg)
			if w.setup != nil {
				w.setup(t, s)
			}
			var stall atomic.Bool
			jsstore.SetBeforeCommit(s, func(ctx context.Context, _ []*nats.Msg) error {
				if stall.Load() {
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			})
			stall.Store(true)
			err := w.write(t.Context(), s)
			if !errors.Is(err, jsstore.ErrUnavailable) || !strings.Contains(err.Error(), "may or may not be stored") {
				t.Fatalf("write never answered: %v; want ErrUnavailable saying the outcome is unknown", err)
			}
			stall.Store(false)
			if err := w.write(t.Context(), s); err != nil {
				t.Fatalf("the write repeated: %v", err)
			}
			w.check(t, s)
		})
	}
}

// TestResendLeaderLoss kills the stream leader of a 3-node cluster in the
// middle of a write, on a connection to a node that survives:
//
//   - before the batch's commit message is sent (the leader has the rest
//     of the batch): the batch is lost with the leader, and the store
//     sends it again to the new leader;
//   - after the leader stored the write and before its acknowledgement
//     reaches the caller (the acknowledgement is dropped as the leader is
//     shut down): the copy sent to the new leader is refused by its
//     compare-and-set, and the store reads back that the write is there.
//
// Either way the caller gets success and the write is stored exactly once.
func TestResendLeaderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3-node clusters")
	}
	writes := resendWrites()
	for _, tc := range []struct {
		name  string
		write resendWrite
		// lostAck: kill after the leader acknowledged (dropping the
		// acknowledgement), else just before the commit is sent.
		lostAck bool
	}{
		{"put/mid-batch", writes[0], false},
		{"put/lost-ack", writes[0], true},
		{"claim/lost-ack", writes[1], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			servers := startCluster(t, 3)
			stream := newStream()
			leader := streamLeader(t, servers, stream)
			home := (leader + 1) % 3
			nc, err := nats.Connect(servers[home].ClientURL(), nats.Name(t.Name()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			// The election takes 4–9 s (nats-server's RAFT election
			// timeout), longer on a loaded machine: give the write room.
			s, err := jsstore.Open(t.Context(), nc, jsstore.Config{Stream: stream, Replicas: 3, RequestTimeout: 2 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if leader = streamLeader(t, servers, stream); leader == home {
				t.Skip("the stream's leader moved to the test's own node")
			}
			if tc.write.setup != nil {
				tc.write.setup(t, s)
			}
			var armed, killed atomic.Bool
			kill := func(msgs []*nats.Msg) bool {
				if (len(msgs) > 1) != tc.write.batch || !armed.CompareAndSwap(true, false) {
					return false
				}
				servers[leader].Shutdown()
				killed.Store(true)
				return true
			}
			if tc.lostAck {
				jsstore.SetDropAck(s, kill)
			} else {
				jsstore.SetBeforeCommit(s, func(_ context.Context, msgs []*nats.Msg) error { kill(msgs); return nil })
			}
			armed.Store(true)
			if err := tc.write.write(t.Context(), s); err != nil {
				t.Fatalf("write during the loss of leader %s: %v", servers[leader].Name(), err)
			}
			if !killed.Load() {
				t.Fatal("the leader was not killed during the write: the test proves nothing")
			}
			tc.write.check(t, s)
		})
	}
}

// streamLeader returns the index of the server leading stream, waiting
// for the stream and its leader; the stream is created on the first call
// (by a store opened through servers[0]).
func streamLeader(t *testing.T, servers []*server.Server, stream string) int {
	t.Helper()
	openR3(t, servers, 0, stream)
	nc, err := nats.Connect(servers[0].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		st, err := js.Stream(t.Context(), stream)
		if err == nil && st.CachedInfo().Cluster != nil {
			for i, ns := range servers {
				if ns.Name() == st.CachedInfo().Cluster.Leader {
					return i
				}
			}
		}
		if time.Now().After(end) {
			t.Fatalf("stream %s has no leader: %v", stream, err)
		}
	}
}

// TestAttemptTimeoutConfig: a negative Config.AttemptTimeout is refused,
// naming the field and what to set instead.
func TestAttemptTimeoutConfig(t *testing.T) {
	ns := startServer(t, "")
	nc := connect(t, ns)
	_, err := jsstore.Open(t.Context(), nc, jsstore.Config{Stream: newStream(), AttemptTimeout: -time.Second})
	if !errors.Is(err, cardstore.ErrInvalid) || !strings.Contains(err.Error(), "Config.AttemptTimeout") || !strings.Contains(err.Error(), "0 for the default") {
		t.Fatalf("Open with a negative AttemptTimeout: %v; want ErrInvalid naming Config.AttemptTimeout and the default", err)
	}
}
