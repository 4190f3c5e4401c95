package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/inbox/kvinbox"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// BenchmarkTurnsResumeCluster runs `utpmesh turns resume` against a
// 3-node mesh (three in-process meshes, the inbox in the replicated KV
// bucket), the command connected to a node, for a turn of one echo call,
// with the agent's inbox holding no other entry and then 10⁵ other
// entries (pending, in turns of ten, inserted through the KV backend).
// The resume reads the turn's entries through the turn's index, so the
// two should cost alike.
func BenchmarkTurnsResumeCluster(b *testing.B) {
	meshes := startMeshCluster3(b)
	url := meshes[1].ClientURL()
	runCLI := func(b *testing.B, args ...string) {
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		code := run(ctx, args, env{stdout: &out, stderr: &errb, getenv: func(k string) string {
			if k == "NATS_URL" {
				return url
			}
			return ""
		}})
		if code != 0 {
			b.Fatalf("utpmesh %v: exit %d\n%s%s", args, code, out.String(), errb.String())
		}
	}
	runCLI(b, "call", "echo", "--agent", "agent-7", "--turn", "t-resume", "--tool-call-id", "c1", "--args", `{"a":1}`)
	resume := func(b *testing.B) {
		for range b.N {
			runCLI(b, "turns", "resume", "t-resume", "--json")
		}
	}
	b.Run("entries=0", resume)

	js, err := jetstream.New(meshes[0].Conn())
	if err != nil {
		b.Fatal(err)
	}
	bk, err := kvinbox.OpenBucket(context.Background(), js, "", 3)
	if err != nil {
		b.Fatal(err)
	}
	kv := kvinbox.New(bk)
	const n = 100_000
	start := time.Now()
	var (
		next atomic.Int64
		done atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, 32)
	)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
				rep := &utp.Report{AgentID: "agent-7", AgentTurnID: fmt.Sprintf("seed-%d", i/10), ToolCallID: fmt.Sprintf("call-%d", i%10),
					ToolResultCardID: card.NewID(), Status: card.StatusSuccess, AfterExecution: card.Suspend, ToolName: "echo"}
				// An insert is idempotent: one cut short by the machine's
				// load is finished by the next attempt.
				var err error
				for range 5 {
					if _, _, err = kv.Insert(context.Background(), "demo", "main", rep, ""); err == nil {
						break
					}
				}
				if err != nil {
					errs <- err
					return
				}
				if d := done.Add(1); d%10_000 == 0 {
					b.Logf("%d entries inserted after %v", d, time.Since(start).Round(time.Second))
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.Logf("inserted %d entries in %v", n, time.Since(start).Round(time.Second))
	b.Run(fmt.Sprintf("entries=%d", n), resume)
}

// startMeshCluster3 starts three in-process meshes forming one cluster
// (routes on loopback), serving echo, with no gate.
func startMeshCluster3(tb testing.TB) []*mesh.Mesh {
	tb.Helper()
	dir := tb.TempDir()
	var routes, listen []string
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		listen = append(listen, l.Addr().String())
		routes = append(routes, "nats-route://"+l.Addr().String())
		l.Close()
	}
	meshes := make([]*mesh.Mesh, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		cfg := mesh.Config{DataDir: filepath.Join(dir, fmt.Sprintf("n%d", i)), Listen: "127.0.0.1:0",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Tools: []worker.Tool{echo.Tool()},
			ServerName: fmt.Sprintf("n%d", i), Cluster: &embednats.Cluster{Name: "resume", Listen: listen[i], Routes: routes}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			meshes[i], errs[i] = mesh.Start(context.Background(), cfg)
		}()
	}
	wg.Wait()
	tb.Cleanup(func() {
		for _, m := range meshes {
			if m != nil {
				_ = m.Stop(context.Background())
			}
		}
	})
	for i, err := range errs {
		if err != nil {
			tb.Fatalf("node %d: %v", i, err)
		}
	}
	return meshes
}
