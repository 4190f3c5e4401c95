package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
)

// lockedBuffer is a bytes.Buffer safe for a command writing while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPCommand: 'utpmesh mcp' over stdio and over HTTP against a gated
// mesh; an MCP client (the official Go SDK) lists and calls echo, and the
// session's turn replays with 'utpmesh turns show'.
func TestMCPCommand(t *testing.T) {
	root := t.TempDir()
	cm := startGatedMesh(t, root)
	demo := filepath.Join(root, "utpmesh-data", "demo-mandate.jwt")
	getenv := func(k string) string {
		if k == "NATS_URL" {
			return cm.url
		}
		return ""
	}
	call := func(t *testing.T, ct sdk.Transport) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "cli-test", Version: "1"}, nil).Connect(ctx, ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tl := range tools.Tools {
			names = append(names, tl.Name)
		}
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " echo ") {
			t.Fatalf("tools/list = %v, want echo", names)
		}
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"hello": "mcp"}})
		if err != nil {
			t.Fatal(err)
		}
		tc, _ := res.Content[0].(*sdk.TextContent)
		if res.IsError || tc == nil || tc.Text != `{"hello":"mcp"}` {
			t.Fatalf("echo result: isError %v, content %+v", res.IsError, res.Content)
		}
		turn, _ := res.Meta[mcpbridge.MetaAgentTurnID].(string)
		return turn
	}

	t.Run("stdio", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cr, sw := io.Pipe()
		sr, cw := io.Pipe()
		var stderr lockedBuffer
		cmd := &mcpCommand{env: env{stdout: sw, stderr: &stderr, getenv: getenv}, stdin: sr}
		done := make(chan error, 1)
		go func() { done <- cmd.Run(ctx, []string{"--mandate", demo}) }()
		turn := call(t, &sdk.IOTransport{Reader: cr, Writer: cw})
		_ = cw.Close()
		if err := <-done; err != nil {
			t.Fatalf("mcp: %v\n%s", err, stderr.String())
		}
		wantContains(t, "stderr", stderr.String(), "serving project demo over stdio as agent demo-agent", "turn "+turn)
		r := cm.must(t, 0, "turns", "show", turn)
		wantContains(t, "turns show", r.stdout, "echo")
	})

	t.Run("http", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan string, 1)
		var stderr lockedBuffer
		cmd := &mcpCommand{env: env{stdout: io.Discard, stderr: &stderr, getenv: getenv}, ready: ready}
		done := make(chan error, 1)
		go func() { done <- cmd.Run(ctx, []string{"--listen", "127.0.0.1:0"}) }()
		var endpoint string
		select {
		case endpoint = <-ready:
		case err := <-done:
			t.Fatalf("mcp --listen: %v\n%s", err, stderr.String())
		}
		tok, err := os.ReadFile(demo)
		if err != nil {
			t.Fatal(err)
		}
		turn := call(t, &sdk.StreamableClientTransport{Endpoint: endpoint,
			HTTPClient: &http.Client{Transport: bearerRT{strings.TrimSpace(string(tok))}}, DisableStandaloneSSE: true})
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("mcp --listen: %v\n%s", err, stderr.String())
		}
		r := cm.must(t, 0, "turns", "show", turn)
		wantContains(t, "turns show", r.stdout, "echo")
	})

	t.Run("usage", func(t *testing.T) {
		r := cm.must(t, 2, "mcp", "--listen", "127.0.0.1:0", "--mandate", demo)
		wantContains(t, "stderr", r.stderr, "drop --mandate and --agent")
		r = cm.must(t, 2, "mcp", "extra")
		wantContains(t, "stderr", r.stderr, "mcp takes no arguments")
	})
}

// mcpHostConfig is the host configuration of docs/mcp.md, the JSON block
// under <!-- mcp: host-config -->.
type mcpHostConfig struct {
	MCPServers map[string]struct {
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Env     map[string]string `json:"env"`
	} `json:"mcpServers"`
}

// readMCPHostConfig reads docs/mcp.md's stdio host configuration.
func readMCPHostConfig(t *testing.T) mcpHostConfig {
	t.Helper()
	b, err := os.ReadFile("../../docs/mcp.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- mcp: host-config -->\n```json\n")
	block, _, closed := strings.Cut(rest, "\n```\n")
	if !ok || !closed {
		t.Fatal("docs/mcp.md has no JSON block under <!-- mcp: host-config -->")
	}
	var cfg mcpHostConfig
	if err := json.Unmarshal([]byte(block), &cfg); err != nil {
		t.Fatalf("docs/mcp.md's host configuration: %v\n%s", err, block)
	}
	if len(cfg.MCPServers) != 1 {
		t.Fatalf("docs/mcp.md's host configuration has %d servers, want one", len(cfg.MCPServers))
	}
	return cfg
}

// TestMCPHostRecipe follows docs/mcp.md's stdio host configuration as
// written against a real 'utpmesh up': the host starts the command with
// exactly the configuration's arguments and environment, from a directory
// of its own (none of the clone's fallbacks exist there), the identity
// being the project's agent identity, not the admin's. The only
// substitutions: /path/to is up's directory, the command is the test
// binary standing in for bin/utpmesh, and NATS_URL is up's random port.
// Without NATS_CREDS the bridge exits naming the agent identity.
func TestMCPHostRecipe(t *testing.T) {
	cfg := readMCPHostConfig(t)
	clone := t.TempDir()
	_, url, _ := startREADMEUp(t, clone, guideEnv("UTPMESH_TEST_EXEC=1"))
	for name, srv := range cfg.MCPServers {
		if srv.Command != "/path/to/bin/utpmesh" || len(srv.Args) == 0 || srv.Args[0] != "mcp" {
			t.Fatalf("server %s: command %q %q, want /path/to/bin/utpmesh mcp …", name, srv.Command, srv.Args)
		}
		if got := filepath.Base(srv.Env["NATS_CREDS"]); got != "agent-demo.nk" {
			t.Fatalf("server %s: NATS_CREDS %q, want the project's agent identity (agent-demo.nk), not the admin's", name, srv.Env["NATS_CREDS"])
		}
		clonePath := func(v string) string { return strings.ReplaceAll(v, "/path/to/", clone+"/") }
		args := make([]string, len(srv.Args))
		for i, a := range srv.Args {
			args[i] = clonePath(a)
		}
		hostEnv := func(without string) []string {
			env := []string{"UTPMESH_TEST_EXEC=1", "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
			for k, v := range srv.Env {
				switch k {
				case without:
				case "NATS_URL":
					env = append(env, k+"="+strings.ReplaceAll(v, "nats://127.0.0.1:4222", url))
				default:
					env = append(env, k+"="+clonePath(v))
				}
			}
			return env
		}

		cmd := exec.Command(utpmeshBin(), args...)
		cmd.Dir, cmd.Env = t.TempDir(), hostEnv("")
		var stderr lockedBuffer
		cmd.Stderr = &stderr
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "host", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
		if err != nil {
			cancel()
			t.Fatalf("server %s: connect: %v\nstderr:\n%s", name, err, stderr.String())
		}
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatalf("tools/list: %v\nstderr:\n%s", err, stderr.String())
		}
		listed := false
		for _, tl := range tools.Tools {
			listed = listed || tl.Name == "echo"
		}
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"from": "host"}})
		if err != nil || !listed || res.IsError || res.Meta[mcpbridge.MetaStatus] != "success" {
			t.Fatalf("echo listed %v; call: %v, %+v\nstderr:\n%s", listed, err, res, stderr.String())
		}
		_ = cs.Close()
		cancel()
		if !strings.Contains(stderr.String(), "utpmesh mcp: serving project demo over stdio as agent demo-agent") {
			t.Fatalf("stderr:\n%s", stderr.String())
		}

		// The same host configuration without the credentials.
		cmd = exec.Command(utpmeshBin(), args...)
		cmd.Dir, cmd.Env = t.TempDir(), hostEnv("NATS_CREDS")
		cmd.Stdin = strings.NewReader("")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Authorization Violation") || !strings.Contains(string(out), "DATA/creds/agent-demo.nk") {
			t.Fatalf("without NATS_CREDS: %v\n%s\nwant Authorization Violation naming agent-demo.nk", err, out)
		}
	}
}
