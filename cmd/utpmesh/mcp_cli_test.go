package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
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
