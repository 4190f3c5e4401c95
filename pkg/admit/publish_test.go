package admit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/admit"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

func TestMain(m *testing.M) {
	meshtest.RunClusterNode()
	os.Exit(m.Run())
}

// TestPublishThroughElection: the admission of a 3-node cluster (its
// CardStore and registry local, so that only the command stream is
// replicated) and the command stream's leader SIGKILLed. Calls dispatched
// at once meet the stream without a leader until the survivors have
// elected one (4–9 s): each is admitted, and its command is stored once
// (one message per Nats-Msg-Id). With a second node killed the node has
// no quorum, and a dispatch fails with the admission's unavailable error
// saying so, not with its deadline.
func TestPublishThroughElection(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster of processes and two elections")
	}
	ctx := context.Background()
	c := meshtest.StartProcessCluster(t, 3)
	ver := subjects.DefaultVersion
	cmds := streams.CommandStream(ver)
	{
		nc := c.Connect()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ectx, cancel := context.WithTimeout(ctx, time.Minute)
		err = streams.Ensure(ectx, js, ver, streams.WithReplicas(3))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	c.WaitStreamCurrent(cmds)
	lead := c.StreamLeader(cmds)
	home, third := (lead+1)%3, (lead+2)%3
	nc, err := nats.Connect(c.URLs()[home])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)

	files := openAdmitFiles(ctx, t, true)
	cards, reg, key := files.cards, files.reg, files.key
	// The quorum signal of the admission's node: in the mesh it is the
	// embedded server's (embednats.Server.Quorum, tested there); these
	// nodes are other processes, so the test counts the running ones.
	quorum := func() error {
		up := 0
		for i := range c.Len() {
			if c.Running(i) {
				up++
			}
		}
		if 2*up <= c.Len() {
			return fmt.Errorf("no quorum: %d of %d nodes", up, c.Len())
		}
		return nil
	}
	s, err := admit.Start(ctx, nc, admit.Config{Store: cards, Registry: reg, Key: key, Quorum: quorum,
		PublishBound: 2 * time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })

	subj, err := subjects.Dispatch(ver, "demo", "main", "a1")
	if err != nil {
		t.Fatal(err)
	}
	dispatch := func(ctx context.Context, call string) error {
		req := utp.DispatchRequest{AgentID: "a1", AgentTurnID: "turn-1", TurnEpoch: 1, StepID: "step-" + call,
			ToolCallID: call, ToolName: "echo", Arguments: []byte(`{}`),
			Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
		var reply utp.DispatchReply
		if err := svc.Call(ctx, nc, subj.String(), admit.Codes, &req, &reply); err != nil {
			return err
		}
		if !reply.Admitted {
			return fmt.Errorf("not admitted: %+v", reply.Error)
		}
		return nil
	}
	if err := dispatch(ctx, "warm"); err != nil {
		t.Fatal(err)
	}

	c.Kill(lead)
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			dctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			errs[i] = dispatch(dctx, fmt.Sprintf("call-%d", i))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("call-%d, dispatched during the election (two of three nodes up): %v", i, err)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c.StreamLeader(cmds) // the new leader answers the reads
	counts := readMsgIDs(t, js, cmds)
	for i := range n {
		id := utp.Ref("demo", "turn-1", fmt.Sprintf("call-%d", i)).MsgID()
		if counts[id] != 1 {
			t.Errorf("command %s stored %d times, want once", id, counts[id])
		}
	}

	// Two of three nodes gone: no quorum, and the dispatch says so.
	c.Kill(third)
	dctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	err = dispatch(dctx, "call-no-quorum")
	if !errors.Is(err, admit.ErrUnavailable) || !strings.Contains(err.Error(), "no quorum") {
		t.Fatalf("dispatch without quorum: %v, want admit.ErrUnavailable naming the lost quorum", err)
	}
	t.Logf("without quorum: %v", err)
}

// readMsgIDs counts the Nats-Msg-Ids of every message in stream. Right
// after an election the stream's info or an ordered consumer's fetch can
// fail or stall (a replica still catching up answers, or none does yet):
// it reads the whole stream again until one read succeeds, for up to two
// minutes.
func readMsgIDs(t *testing.T, js jetstream.JetStream, stream string) map[string]int {
	t.Helper()
	var last error
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		counts, err := func() (map[string]int, error) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			st, err := js.Stream(ctx, stream)
			if err != nil {
				return nil, err
			}
			oc, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
			if err != nil {
				return nil, err
			}
			counts := map[string]int{}
			for range st.CachedInfo().State.Msgs {
				m, err := oc.Next(jetstream.FetchMaxWait(10 * time.Second))
				if err != nil {
					return nil, err
				}
				counts[m.Headers().Get(jetstream.MsgIDHeader)]++
			}
			return counts, nil
		}()
		if err == nil {
			return counts
		}
		last = err
	}
	t.Fatalf("read stream %s: %v", stream, last)
	return nil
}
