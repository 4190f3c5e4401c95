package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/catalog"
	"github.com/utpmesh/utpmesh/services/echo"
)

// cliMesh is a real mesh for the CLI tests: echo plus test tools counter
// (a different result on every execution) and fail (always bad_request).
type cliMesh struct {
	m   *mesh.Mesh
	url string
}

func startCLIMesh(t *testing.T) *cliMesh {
	t.Helper()
	var n atomic.Int64
	tools := []worker.Tool{
		echo.Tool(),
		{Name: "counter", Description: "returns how many times it ran", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
			return worker.OK(map[string]any{"n": n.Add(1)}), nil
		}},
		{Name: "fail", Description: "always fails", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
			return worker.Result{}, worker.Fail(card.CodeBadRequest, "fail always fails")
		}},
	}
	m, err := mesh.Start(context.Background(), mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Tools: tools,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	})
	return &cliMesh{m: m, url: m.ClientURL()}
}

// startGatedMesh starts a real mesh the way 'utpmesh up' does with its
// default data directory: the Cedar gate on, the demo policy and the demo
// mandate in root/utpmesh-data, serving echo, atlas.calendar and
// atlas.utility. Tests that want the CLI to find the demo mandate as a
// local 'up' would leave it run with t.Chdir(root).
func startGatedMesh(t *testing.T, root string) *cliMesh {
	t.Helper()
	return startServicesMesh(t, root, []string{"echo", "atlas.calendar", "atlas.utility"}, nil)
}

// startServicesMesh is startGatedMesh serving the given catalogue
// services; auth, when set, gives the mesh's AuthConfig for its data
// directory (e.g. ATP's booking states).
func startServicesMesh(t *testing.T, root string, services []string, auth func(dir string) *mesh.AuthConfig) *cliMesh {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dir := filepath.Join(root, "utpmesh-data")
	late := catalog.NewLate()
	tools, err := catalog.Build(services, catalog.Deps{DataDir: dir, Context: ctx, Late: late})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ac := &mesh.AuthConfig{}
	if auth != nil {
		ac = auth(dir)
	}
	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Tools: tools,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Auth: ac})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = m.Stop(sctx)
		cancel()
	})
	late.Set(m.Conn(), m.Cards())
	if _, err := setupAuth(ctx, m); err != nil {
		t.Fatal(err)
	}
	return &cliMesh{m: m, url: m.ClientURL()}
}

// result is one in-process run of the CLI.
type result struct {
	code           int
	stdout, stderr string
}

// run runs `utpmesh args...` in process against the mesh (NATS_URL points
// at it, so no --nats is needed).
func (cm *cliMesh) run(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := run(ctx, args, env{stdout: &out, stderr: &errb, getenv: func(k string) string {
		if k == "NATS_URL" {
			return cm.url
		}
		return ""
	}})
	return result{code, out.String(), errb.String()}
}

// must runs the CLI and fails the test unless the exit code is want.
func (cm *cliMesh) must(t *testing.T, want int, args ...string) result {
	t.Helper()
	r := cm.run(t, args...)
	if r.code != want {
		t.Fatalf("utpmesh %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
	}
	return r
}

func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("output is not the JSON expected: %v\n%s", err, s)
	}
	return v
}

func wantContains(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Fatalf("%s lacks %q:\n%s", what, sub, s)
		}
	}
}
