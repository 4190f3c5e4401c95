package mesh_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/tmpfstest"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// TestDiskFullMesh: a whole mesh on a 32 MiB volume filled to the brim.
// A call fails at once with an error naming the full disk (never a
// timeout), the mesh is not Ready (/readyz) and says why, and once the
// filler is removed it heals by itself: calls succeed again and the
// result of a call made before the fault is still there. It used to
// answer /healthz 200 throughout and time every publish out until a
// restart.
func TestDiskFullMesh(t *testing.T) {
	vol := tmpfstest.Mount(t, 32<<20)

	ctx := context.Background()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: vol, Listen: "127.0.0.1:0", Logger: quiet, Tools: []worker.Tool{echo.Tool()},
		MaxPayload: 2 << 20, MaxCardBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	ac, err := agent.New(m.Conn(), agent.Config{Project: "demo", Channel: "main", AgentID: "diskfull"})
	if err != nil {
		t.Fatal(err)
	}
	call := func(i int, wait time.Duration) (*agent.Outcome, error) {
		cctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		return ac.Call(cctx, agent.CallRequest{ToolName: "echo", AgentTurnID: "turn-diskfull", Arguments: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
	}
	before, err := call(0, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Ready(); err != nil {
		t.Fatalf("Ready before the fault: %v", err)
	}

	filler := tmpfstest.Fill(t, vol)
	waitFor(t, "the mesh not ready on a full disk", func() bool { return m.Ready() != nil })
	if rerr := m.Ready(); !errors.Is(rerr, embednats.ErrNotReady) || !strings.Contains(rerr.Error(), "disk full") {
		t.Fatalf("Ready = %v, want ErrNotReady naming the full disk", rerr)
	}
	start := time.Now()
	_, err = call(1, 20*time.Second)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call on a full disk: %v, want an error at once", err)
	}
	t.Logf("call on a full disk failed after %v: %v", time.Since(start).Round(time.Millisecond), err)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the mesh ready after the filler is gone", func() bool { return m.Ready() == nil })
	healed := time.Now()
	out, err := call(2, 60*time.Second)
	if err != nil {
		t.Fatalf("call after the heal: %v", err)
	}
	t.Logf("first call after the heal answered in %v", time.Since(healed).Round(time.Millisecond))
	if out.Result.Status != card.StatusSuccess {
		t.Fatalf("call after the heal: %s, want success", out.Result.Status)
	}
	got, err := m.Cards().Get(ctx, "demo", before.ResultCard.CardID)
	if err != nil || got.CardID != before.ResultCard.CardID {
		t.Fatalf("result card of the call before the fault: %v", err)
	}
}

// waitFor polls cond every 50 ms until it holds or 30 s passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
