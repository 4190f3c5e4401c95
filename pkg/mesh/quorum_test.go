package mesh_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/embednats"
)

// TestNoQuorumMesh: three meshes as one cluster; with two of them
// stopped the survivor is not Ready (no quorum) and a call to it fails at
// once with an error, not after its deadline. It used to take 30 s to
// fail while the survivor's /healthz said 200.
func TestNoQuorumMesh(t *testing.T) {
	ctx := context.Background()
	meshes := startMeshes(t, "quorum")
	nc, err := nats.Connect(meshes[0].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ac, err := agent.New(nc, agent.Config{Project: "demo", Channel: "main", AgentID: "quorum"})
	if err != nil {
		t.Fatal(err)
	}
	call := func(i int) error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := ac.Call(cctx, agent.CallRequest{ToolName: "echo", AgentTurnID: "turn-quorum", Arguments: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
		return err
	}
	if err := call(0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every node ready", func() bool {
		for _, m := range meshes {
			if m.Ready() != nil {
				return false
			}
		}
		return true
	})

	for _, m := range meshes[1:] {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_ = m.Stop(sctx)
		cancel()
	}
	waitFor(t, "the survivor not ready", func() bool { return meshes[0].Ready() != nil })
	if rerr := meshes[0].Ready(); !errors.Is(rerr, embednats.ErrNotReady) || !strings.Contains(rerr.Error(), "quorum") {
		t.Fatalf("survivor Ready = %v, want ErrNotReady naming the lost quorum", rerr)
	}
	// The command stream's leader may be the survivor, which keeps its
	// leadership until its raft group notices the lost quorum; a call it
	// takes meanwhile waits. Wait for the step-down (a probe call that
	// fails with an error, not its short deadline): from then on every
	// call fails at once.
	stepDown := time.Now().Add(90 * time.Second)
	for i := 100; ; i++ {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, perr := ac.Call(pctx, agent.CallRequest{ToolName: "echo", AgentTurnID: "turn-quorum", Arguments: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
		cancel()
		if perr != nil && !errors.Is(perr, context.DeadlineExceeded) {
			break
		}
		if time.Now().After(stepDown) {
			t.Fatalf("calls without quorum still wait (%v): the command stream's leader never stepped down", perr)
		}
	}
	start := time.Now()
	err = call(1)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call without quorum: %v, want an error at once", err)
	}
	t.Logf("call without quorum failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
}
