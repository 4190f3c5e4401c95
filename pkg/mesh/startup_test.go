package mesh_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/datalock"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// A second mesh on a data directory that a running mesh holds fails at
// once naming the holder; once the first stops, the directory is free.
func TestDataDirInUse(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet, Command: "utpmesh up"})
	if err != nil {
		t.Fatal(err)
	}
	built := false
	_, err = mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet, Command: "second",
		Services: func(context.Context, *mesh.Mesh) ([]worker.Tool, error) { built = true; return nil, nil }})
	want := "data directory " + dir + " is in use by pid " + strconv.Itoa(os.Getpid()) + " (utpmesh up, started "
	if !errors.Is(err, datalock.ErrInUse) || !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), "; stop it, or pass --data with another directory") {
		t.Fatalf("second Start = %v, want %q…", err, want)
	}
	if built {
		t.Fatal("the refused mesh built its services")
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	m, err = mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatalf("Start after the holder stopped = %v", err)
	}
	_ = m.Stop(ctx)
}

// A busy NATS or metrics address fails at once, says which and what to
// pass instead, builds no services, and leaves the data directory free.
func TestBusyAddress(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	tests := []struct {
		name    string
		listen  string
		metrics string
		want    string
	}{
		{"nats", addr, "", "listen " + addr + ": address already in use; is another 'utpmesh up' or nats-server running? pass --nats-listen 127.0.0.1:0 for a free port"},
		{"metrics", "127.0.0.1:0", addr, "metrics listen " + addr + ": address already in use; is another 'utpmesh up' running? pass --metrics-addr 127.0.0.1:0 for a free port, or --metrics-addr '' for no metrics"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			built := false
			_, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: tc.listen, MetricsAddr: tc.metrics, Logger: quiet,
				Services: func(context.Context, *mesh.Mesh) ([]worker.Tool, error) { built = true; return nil, nil }})
			if !errors.Is(err, embednats.ErrAddrInUse) || err.Error() != tc.want {
				t.Fatalf("Start = %v,\nwant %s", err, tc.want)
			}
			if built {
				t.Fatal("the aborted start built its services")
			}
			m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet})
			if err != nil {
				t.Fatalf("Start after the aborted one = %v (the data directory stayed locked?)", err)
			}
			_ = m.Stop(ctx)
		})
	}
}

// Services get the running mesh and a context that ends when the mesh
// stops, after the worker's drain (a call still running at the drain
// deadline sees it alive), not when Start's context ends.
func TestServices(t *testing.T) {
	startCtx, cancelStart := context.WithCancel(context.Background())
	var svcCtx context.Context
	started := make(chan struct{}, 1)
	aliveAtDrain := make(chan error, 1)
	hold := worker.Tool{Name: "hold", Parameters: json.RawMessage(`{"type":"object"}`),
		Handler: func(ctx context.Context, _ *worker.Call) (worker.Result, error) {
			started <- struct{}{}
			<-ctx.Done() // canceled by the drain deadline, inside Stop
			aliveAtDrain <- svcCtx.Err()
			return worker.Result{}, ctx.Err()
		}}
	m, err := mesh.Start(startCtx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quiet,
		Services: func(ctx context.Context, m *mesh.Mesh) ([]worker.Tool, error) {
			if m.Conn() == nil || m.Cards() == nil {
				t.Error("Services called before the connection and CardStore exist")
			}
			svcCtx = ctx
			return []worker.Tool{echo.Tool(), hold}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	cancelStart()
	if svcCtx.Err() != nil {
		t.Fatal("the services' context ended with Start's")
	}
	served := map[string]bool{}
	for _, tl := range m.Runtime().Tools() {
		served[tl.Name] = true
	}
	if !served[echo.Name] || !served["hold"] {
		t.Fatalf("the services' tools are not served: %v", served)
	}
	ac, err := agent.New(m.Conn(), agent.Config{Project: "demo", Channel: "main", AgentID: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	go func() {
		_, _ = ac.Call(context.Background(), agent.CallRequest{ToolName: "hold", AgentTurnID: "turn-h"})
	}()
	<-started
	drain, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := m.Stop(drain); err != nil {
		t.Fatal(err)
	}
	if err := <-aliveAtDrain; err != nil {
		t.Fatalf("the services' context had ended before the drain finished: %v", err)
	}
	if svcCtx.Err() == nil {
		t.Fatal("the services' context did not end with Stop")
	}
}
