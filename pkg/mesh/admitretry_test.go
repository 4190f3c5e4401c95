package mesh_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestAdmissionThroughLeaderLoss: three meshes as one cluster, an agent
// on a node that survives dispatching calls without pause, and the
// command stream's leader's nats-server shut down abruptly (no
// step-down: the others wait out a RAFT election). The admission's
// publish of a command finds the stream without a leader for seconds; it
// used to fail the call at once ("no response from stream"). Now every
// dispatch succeeds (two of three nodes keep the quorum), and the stream
// holds every admitted command exactly once (one message per
// Nats-Msg-Id, however many copies were sent during the election). A
// dispatch request left unanswered (sent once, lost with the node) is
// retried with its tool_call_id, as a caller would.
func TestAdmissionThroughLeaderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster and a leader election")
	}
	ctx := context.Background()
	meshes := startMeshes(t, "admitretry")
	cmds := streams.CommandStream(subjects.DefaultVersion)
	lead := cmdLeader(t, meshes, cmds, "")
	home := (lead + 1) % 3
	nc, err := nats.Connect(meshes[home].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ac, err := agent.New(nc, agent.Config{Project: "demo", Channel: "main", AgentID: "admitretry"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ac.Close() })

	type dispatched struct {
		turn, call string
		err        error
	}
	var (
		mu     sync.Mutex
		done   []dispatched
		after  int // dispatches that succeeded after the new leader was seen
		killed = make(chan struct{})
		wg     sync.WaitGroup
	)
	newLeader := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				turn := fmt.Sprintf("turn-admitretry-%d", g)
				req := agent.CallRequest{ToolName: "echo", AgentTurnID: turn, ToolCallID: card.NewID(), Arguments: json.RawMessage(fmt.Sprintf(`{"g":%d,"i":%d}`, g, i))}
				dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				_, err := ac.Dispatch(dctx, req)
				cancel()
				if errors.Is(err, svc.ErrTimeout) {
					// A dispatch request is sent once; one in flight at
					// the node's death may go unanswered. Its caller
					// retries with the same tool_call_id (safe: the card
					// and the command are stored once).
					t.Logf("dispatch unanswered, retried with its tool_call_id: %v", err)
					dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
					_, err = ac.Dispatch(dctx, req)
					cancel()
				}
				d := dispatched{turn: turn, call: req.ToolCallID, err: err}
				mu.Lock()
				done = append(done, d)
				select {
				case <-newLeader:
					if err == nil {
						after++
					}
				default:
				}
				n, a := len(done), after
				mu.Unlock()
				if n == 20 {
					close(killed) // enough calls before the kill: the load is on
				}
				if a >= 40 || n >= 2000 {
					return
				}
			}
		})
	}
	<-killed
	leaderName := meshes[lead].NATS().NATS().Name()
	// The node dies; its admission first, as with its process: otherwise
	// its connection reconnects to a survivor and its admission, asking
	// its dead server for the quorum, refuses calls there.
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	if err := meshes[lead].Admission().Stop(sctx); err != nil {
		t.Fatal(err)
	}
	scancel()
	meshes[lead].NATS().NATS().Shutdown()
	cmdLeader(t, meshes, cmds, leaderName)
	close(newLeader)
	wg.Wait()

	var ok []dispatched
	for _, d := range done {
		if d.err != nil {
			t.Errorf("dispatch in turn %s failed although two of three nodes keep the quorum: %v", d.turn, d.err)
			continue
		}
		ok = append(ok, d)
	}
	if t.Failed() {
		return
	}
	// Every admitted command once in the stream.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	counts := commandsByMsgID(t, js, cmds)
	for _, d := range ok {
		id := utp.Ref("demo", d.turn, d.call).MsgID()
		if n := counts[id]; n != 1 {
			t.Errorf("command of tool_call_id %s (Nats-Msg-Id %s) stored %d times, want 1", d.call, id, n)
		}
	}
	t.Logf("%d dispatches, every one admitted and its command stored once", len(ok))
}

// cmdLeader waits until stream has a leader other than not on a running
// node of meshes, with every other running node a current replica, and
// returns that node's index.
func cmdLeader(t *testing.T, meshes []*mesh.Mesh, stream, not string) int {
	t.Helper()
	var last string
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		for i, m := range meshes {
			srv := m.NATS().NATS()
			if !srv.Running() || srv.Name() == not {
				continue
			}
			leader, current, err := streamLeader(m.ClientURL(), stream)
			if err != nil {
				last = err.Error()
				break
			}
			if leader == "" || leader == not {
				last = "no leader yet"
				break
			}
			running := 0
			for _, o := range meshes {
				if o.NATS().NATS().Running() && o.NATS().NATS().Name() != not {
					running++
				}
			}
			if current+1 < running {
				last = fmt.Sprintf("%d current replicas besides the leader", current)
				break
			}
			for j, o := range meshes {
				if o.NATS().NATS().Name() == leader {
					return j
				}
			}
			last = fmt.Sprintf("leader %s is no node (asked node %d)", leader, i)
			break
		}
	}
	t.Fatalf("stream %s: no leader with current replicas: %s", stream, last)
	return -1
}

// streamLeader asks a node for stream's leader and its current replicas.
func streamLeader(url, stream string) (string, int, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return "", 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return "", 0, err
	}
	ci := st.CachedInfo().Cluster
	if ci == nil {
		return "", 0, errors.New("no cluster info")
	}
	current := 0
	for _, r := range ci.Replicas {
		if r.Current && !r.Offline {
			current++
		}
	}
	return ci.Leader, current, nil
}

// commandsByMsgID counts the messages of stream per Nats-Msg-Id. A read
// that fails (the stream's or the consumer's leader moving: the mesh
// gathers leaders) is started again, up to a bound.
func commandsByMsgID(t *testing.T, js jetstream.JetStream, stream string) map[string]int {
	t.Helper()
	var last error
	for range 20 {
		counts, err := countByMsgID(js, stream)
		if err == nil {
			return counts
		}
		last = err
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("read stream %s: %v", stream, last)
	return nil
}

func countByMsgID(js jetstream.JetStream, stream string) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	total := st.CachedInfo().State.Msgs
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	for range total {
		m, err := c.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			return nil, err
		}
		if id := m.Headers().Get(jetstream.MsgIDHeader); id != "" {
			counts[id]++
		}
	}
	return counts, nil
}
