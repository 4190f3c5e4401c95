package mcpbridge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
	"github.com/utpmesh/utpmesh/pkg/confirm/confirmtest"
)

// helperEnv makes the test binary run as a stdio bridge (see TestMain):
// the TypeScript client starts it the way an MCP host starts 'utpmesh mcp'.
const helperEnv = "UTPMESH_MCP_TEST_BRIDGE"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		if err := serveHelper(); err != nil {
			fmt.Fprintln(os.Stderr, "helper bridge:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveHelper serves a stdio bridge on the mesh at $NATS_URL as the
// mandate in $UTPMESH_MANDATE.
func serveHelper() error {
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		return err
	}
	defer nc.Close()
	b, err := mcpbridge.New(mcpbridge.Config{Conn: nc, Project: "demo", Logger: quiet})
	if err != nil {
		return err
	}
	defer b.Close()
	id, err := mcpbridge.NewIdentity("", os.Getenv("UTPMESH_MANDATE"))
	if err != nil {
		return err
	}
	return b.ServeStdio(context.Background(), id, os.Stdin, os.Stdout)
}

// tsClient is testdata/tsclient with its node_modules, or the test skips
// saying how to get them.
func tsClient(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not on PATH: the foreign-client test needs Node.js (20 or later) and the MCP TypeScript SDK")
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "tsclient"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Skipf("the MCP TypeScript SDK is not installed; install it with: npm ci --prefix %s", dir)
	}
	return dir
}

// TestForeignClientTypeScript: the MCP TypeScript SDK's client lists the
// tools and calls echo over stdio (starting the bridge as a host does) and
// over streamable HTTP.
func TestForeignClientTypeScript(t *testing.T) {
	dir := tsClient(t)
	f := startMesh(t)
	run := func(t *testing.T, env []string, args ...string) {
		t.Helper()
		stdout, stderr := runTSClient(t, dir, env, args...)
		var out struct {
			Tools  []string `json:"tools"`
			Result struct {
				IsError           bool           `json:"isError"`
				StructuredContent map[string]any `json:"structuredContent"`
				Content           []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"result"`
		}
		if err := json.Unmarshal(stdout, &out); err != nil {
			t.Fatalf("client output %q: %v\nstderr:\n%s", stdout, err, stderr)
		}
		if !slices.Contains(out.Tools, "echo") || !slices.Contains(out.Tools, confirmtest.Tool) {
			t.Fatalf("tools = %v", out.Tools)
		}
		r := out.Result
		if r.IsError || r.StructuredContent["from"] != "typescript" || len(r.Content) != 1 || r.Content[0].Text != `{"from":"typescript"}` {
			t.Fatalf("echo result = %+v", r)
		}
	}
	t.Run("stdio", func(t *testing.T) {
		run(t, []string{helperEnv + "=1", "NATS_URL=" + f.m.ClientURL(), "UTPMESH_MANDATE=" + f.demo},
			"stdio", os.Args[0], "-test.run=^$")
	})
	t.Run("http", func(t *testing.T) {
		hs := httptest.NewServer(f.bridge(t).HTTPHandler())
		defer hs.Close()
		run(t, nil, "http", hs.URL+mcpbridge.HTTPPath, f.demo)
	})
	// Without the bearer token the SDK's error carries the bridge's
	// error_description: what to send (no OAuth flow is started).
	t.Run("http without a token", func(t *testing.T) {
		hs := httptest.NewServer(f.bridge(t).HTTPHandler())
		defer hs.Close()
		stdout, stderr := runTSClient(t, dir, nil, "http", hs.URL+mcpbridge.HTTPPath)
		var out struct {
			ConnectError string `json:"connect_error"`
		}
		if err := json.Unmarshal(stdout, &out); err != nil || !strings.Contains(out.ConnectError, `"error":"invalid_request"`) ||
			!strings.Contains(out.ConnectError, "send the caller's mandate JWT as 'Authorization: Bearer <token>'") {
			t.Fatalf("client output %q (%v), want a 401 saying what to send\nstderr:\n%s", stdout, err, stderr)
		}
	})
}

// runTSClient runs client.mjs with args and the test's environment plus
// env, and returns its stdout and stderr; it fails the test if the client
// fails.
func runTSClient(t *testing.T, dir string, env []string, args ...string) (stdout []byte, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{filepath.Join(dir, "client.mjs")}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client.mjs %v: %v\nstderr:\n%s", args, err, errb.String())
	}
	return out.Bytes(), errb.String()
}
