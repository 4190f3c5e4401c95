package retention_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/retention"
	"github.com/utpmesh/utpmesh/pkg/turn"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func dirSize(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return 0
	}
	err := filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// soakMesh is a real mesh serving echo whose retention sweeper keeps
// turns under a policy the test gives, by a clock the test moves forward.
type soakMesh struct {
	m     *mesh.Mesh
	dir   string
	nc    *nats.Conn
	ahead atomic.Int64 // how far the sweeper's clock is ahead of time.Now
	// args are every call's arguments (echoed in its result).
	args json.RawMessage
}

func startSoakMesh(t testing.TB, pol retention.Policy) *soakMesh {
	t.Helper()
	sm := &soakMesh{dir: t.TempDir(), args: json.RawMessage(`{"i":1}`)}
	m, err := mesh.Start(context.Background(), mesh.Config{DataDir: sm.dir, Listen: "127.0.0.1:0", Logger: quiet,
		Tools: []worker.Tool{echo.Tool()}, Worker: worker.Config{Concurrency: 32},
		Retention: retention.Config{Policies: policies{project: pol}, Interval: time.Hour,
			Clock: func() time.Time { return time.Now().Add(time.Duration(sm.ahead.Load())) }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	})
	sm.m = m
	if sm.nc, err = nats.Connect(m.ClientURL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sm.nc.Close)
	return sm
}

// calls makes n echo calls, conc at a time, ten per turn, in turns named
// prefix-<i/10>; every result is consumed (acked).
func (sm *soakMesh) calls(t testing.TB, ac *agent.Client, prefix string, n, conc int) {
	t.Helper()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, conc)
	)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				_, err := ac.Call(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: fmt.Sprintf("%s-%d", prefix, i/10), Arguments: sm.args})
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// settle waits until the inbox holds exactly want pending entries: the
// agent's lazy acks are written.
func (sm *soakMesh) settle(t testing.TB, want int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := sm.m.Inbox().Pending()
		if err != nil {
			t.Fatal(err)
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the inbox holds %d pending entries, want %d", n, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sweep runs one sweep of the project (again if the background sweeper
// held the project's claim) and returns its report.
func (sm *soakMesh) sweep(t testing.TB) *retention.Report {
	t.Helper()
	for range 100 {
		reps := sm.m.Retention().SweepAll(context.Background())
		if len(reps) != 1 {
			t.Fatalf("sweep reports %v, want one for %s", reps, project)
		}
		if !reps[0].Skipped {
			return reps[0]
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the project's sweep claim stays held")
	return nil
}

// TestSoakDiskBounded: 2,000 echo calls in ten rounds on a real mesh,
// with a ten-minute max age and a sweeper clock twenty minutes ahead after
// each round but the last. Each sweep removes exactly the rounds before
// it; a turn with a result its agent never consumed stays, with its entry
// pending; the last round's turns stay and replay whole; the CardStore and
// inbox files stop growing after the first rounds.
func TestSoakDiskBounded(t *testing.T) {
	const rounds, perRound, conc = 10, 200, 16
	sm := startSoakMesh(t, retention.Policy{MaxAge: 10 * time.Minute})
	// 1 KB of arguments, echoed: ~2.5 KB of cards per call, so that what
	// passes through the CardStore (5 MB) dwarfs any one round's data.
	sm.args = json.RawMessage(`{"pad":"` + strings.Repeat("x", 1024) + `"}`)
	ctx := context.Background()
	ac, err := agent.New(sm.nc, agent.Config{Project: project, AgentID: "soak"})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	// A result nobody consumes: its turn must outlive every sweep.
	keeper, err := agent.New(sm.nc, agent.Config{Project: project, AgentID: "keeper"})
	if err != nil {
		t.Fatal(err)
	}
	defer keeper.Close()
	pend, err := keeper.Dispatch(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: "kept-pending", Arguments: json.RawMessage(`{"keep":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	sm.settle(t, 1)

	var cardsAt []int64
	archived, entries := 0, 0
	for r := range rounds {
		sm.calls(t, ac, fmt.Sprintf("r%d", r), perRound, conc)
		sm.settle(t, 1)
		last := r == rounds-1
		if last {
			sm.ahead.Store(0) // the last round's turns are seconds old
		} else {
			sm.ahead.Store(int64(20 * time.Minute))
		}
		rep := sm.sweep(t)
		wantDeleted, wantKept := perRound/10, 1 // the pending turn, past the limit but kept
		if last {
			wantDeleted, wantKept = 0, 0
		}
		if len(rep.Deleted) != wantDeleted || len(rep.Kept) != wantKept || (wantKept == 1 && rep.Kept[0].AgentTurnID != "kept-pending") {
			t.Fatalf("round %d: sweep deleted %d turns, kept %v; want %d deleted and the pending turn kept", r, len(rep.Deleted), rep.Kept, wantDeleted)
		}
		archived += rep.Cards
		entries += rep.Entries
		cardsAt = append(cardsAt, fileSize(t, filepath.Join(sm.dir, "cards.db")))
	}
	t.Logf("cards.db by round: %v", cardsAt)
	t.Logf("jetstream/: %d bytes, archive/: %d bytes", dirSize(t, filepath.Join(sm.dir, "jetstream")), dirSize(t, filepath.Join(sm.dir, "archive")))
	if want := (rounds - 1) * perRound * 2; archived != want {
		t.Errorf("archived %d cards, want %d (a call and a result per call of the swept rounds)", archived, want)
	}
	// Bounded: after the second round the files grow no more than a
	// round's worth of fragmentation, and cards.db ends smaller than the
	// cards that passed through it (archived), which it would hold
	// without retention.
	for _, f := range []struct {
		name  string
		sizes []int64
	}{{"cards.db (cards and inbox entries)", cardsAt}} {
		if final, second := f.sizes[rounds-1], f.sizes[1]; final > 2*second {
			t.Errorf("%s grew from %d bytes after round 2 to %d after round %d: not bounded", f.name, second, final, rounds)
		}
	}
	if a := dirSize(t, filepath.Join(sm.dir, "archive")); cardsAt[rounds-1] >= a {
		t.Errorf("cards.db holds %d bytes, not less than the %d bytes of cards archived from it", cardsAt[rounds-1], a)
	}
	// Nothing pending is lost.
	es, err := sm.m.Inbox().List(ctx, project, inbox.ListQuery{AgentID: "keeper", State: inbox.StatePending})
	if err != nil || len(es) != 1 || es[0].ToolCallID != pend.ToolCallID {
		t.Fatalf("keeper's pending entries: %v, %v; want its one call", es, err)
	}
	if _, err := sm.m.Cards().Get(ctx, project, es[0].ToolResultCardID); err != nil {
		t.Fatalf("the pending entry's result card: %v", err)
	}
	if want := (rounds - 1) * perRound; entries != want {
		t.Errorf("deleted %d inbox entries, want %d (one per call of the swept rounds)", entries, want)
	}
	// The kept turns replay whole: the pending one and the last round's.
	res, err := sm.m.Cards().ListTurns(ctx, cardstore.ListTurnsRequest{ProjectID: project})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Turns) != perRound/10+1 {
		t.Fatalf("%d turns left, want the last round's %d and the pending one", len(res.Turns), perRound/10)
	}
	for _, ti := range res.Turns {
		tr, err := turn.Load(ctx, sm.m.Cards(), project, ti.AgentTurnID)
		if err != nil {
			t.Fatalf("load kept turn %s: %v", ti.AgentTurnID, err)
		}
		want := 10
		if ti.AgentTurnID == "kept-pending" {
			want = 1
		}
		if len(tr.Calls) != want {
			t.Fatalf("kept turn %s has %d calls, want %d", ti.AgentTurnID, len(tr.Calls), want)
		}
		for _, c := range tr.Calls {
			if c.Status != "success" {
				t.Fatalf("kept turn %s: call %s is %s", ti.AgentTurnID, c.ToolCallID, c.Status)
			}
		}
	}
}
