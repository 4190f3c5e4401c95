package embednats_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/tmpfstest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/embednats"
)

// await polls cond every 50 ms until it holds or 30 s passed.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDiskFullHeals: on a 24 MiB volume filled to the brim, JetStream
// publishes fail at once with an error (not a timeout), the server is not
// Ready and says why, and once the filler is removed it heals by itself:
// publishes are stored again and every message acknowledged before the
// fault is still there. Without the storage guard the stream kept its
// write error: every publish timed out until a restart. Two ways in: the
// floor (free space below MinFreeBytes stops JetStream before a write
// fails) and a write that failed (no floor: nats-server's own ENOSPC).
func TestDiskFullHeals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		minFree int64
		cause   string
	}{
		{"floor", 2 << 20, "disk full"},
		{"write error", -1, "no space left on device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vol := tmpfstest.Mount(t, 24<<20)
			srv, err := embednats.Start(embednats.Config{DataDir: vol, Port: -1, JetStream: true, MaxPayload: embednats.MinMaxPayload,
				MinFreeBytes: tc.minFree, StorageCheck: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
			nc, err := srv.Connect(nats.MaxReconnects(-1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			js, _ := jetstream.New(nc)
			ctx := context.Background()
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
				t.Fatal(err)
			}
			acked := map[uint64]string{}
			publish := func(i int) error {
				pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				data := fmt.Sprintf("msg-%d-%s", i, strings.Repeat("x", 2000))
				ack, err := js.Publish(pctx, fmt.Sprintf("s.%d", i), []byte(data))
				if err == nil {
					acked[ack.Sequence] = data
				}
				return err
			}
			for i := range 20 {
				if err := publish(i); err != nil {
					t.Fatal(err)
				}
			}
			if err := srv.Ready(); err != nil {
				t.Fatalf("Ready before the fault: %v", err)
			}

			filler := tmpfstest.Fill(t, vol)
			// Publish until one fails: with the floor, the first; without
			// it, the write that hit ENOSPC (which nats-server leaves
			// unanswered: that one may time out).
			i := 100
			for ; ; i++ {
				if err := publish(i); err != nil {
					break
				}
				if i > 2000 {
					t.Fatal("publishes kept succeeding on a full disk")
				}
			}
			await(t, "not ready", func() bool { return srv.Ready() != nil })
			rerr := srv.Ready()
			if !errors.Is(rerr, embednats.ErrNotReady) || !strings.Contains(rerr.Error(), tc.cause) {
				t.Fatalf("Ready on a full disk = %v, want ErrNotReady naming %q", rerr, tc.cause)
			}
			t.Logf("not ready: %v", rerr)
			// Now every publish fails at once, and not by a timeout.
			for k := range 5 {
				err := publish(i + 1 + k)
				if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
					t.Fatalf("publish on a full disk: %v, want an immediate error", err)
				}
			}

			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			await(t, "ready after the filler is gone", func() bool { return srv.Ready() == nil })
			for k := range 20 {
				// The client may still be resubscribing: a publish right
				// after the restart of JetStream can see no responder.
				await(t, "a publish after the heal", func() bool { return publish(5000+k) == nil })
			}
			st, err := js.Stream(ctx, "S")
			if err != nil {
				t.Fatal(err)
			}
			for seq, data := range acked {
				m, err := st.GetMsg(ctx, seq)
				if err != nil {
					t.Fatalf("acknowledged message %d: %v, want it kept", seq, err)
				}
				if string(m.Data) != data {
					t.Fatalf("acknowledged message %d holds %.20q, want %.20q", seq, m.Data, data)
				}
			}
			t.Logf("%d acknowledged messages all kept", len(acked))
		})
	}
}
