package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestUpWorkerIdentityUsage: a bad --worker-identity is a usage error
// (exit 2) that says what to type, before anything starts.
func TestUpWorkerIdentityUsage(t *testing.T) {
	tests := []struct {
		name  string
		value string
		extra []string
		want  string
	}{
		{"no tools", "reverse", nil, "want SERVICE=TOOL[,TOOL...], e.g. --worker-identity reverse=reverse"},
		{"empty tools", "reverse=", nil, "want SERVICE=TOOL[,TOOL...]"},
		{"empty service", "=reverse", nil, "want SERVICE=TOOL[,TOOL...]"},
		{"bad tool", "reverse=re verse", nil, "want SERVICE=TOOL[,TOOL...]"},
		{"empty tool token", "reverse=a..b", nil, "want SERVICE=TOOL[,TOOL...]"},
		{"built-in tool", "reverse=list_tools", nil, `"list_tools" is a built-in PMO tool`},
		{"catalogue service", "echo=reverse", nil, "echo is a catalogue service"},
		{"a catalogue service's tool", "x=echo", nil, "tool echo is served by echo already (worker-echo)"},
		{"twice", "reverse=reverse", []string{"--worker-identity", "reverse=upper"}, "reverse is given twice"},
		{"insecure", "reverse=reverse", []string{"--insecure"}, "--worker-identity needs NATS authentication: drop --insecure"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"up", "--data", t.TempDir(), "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "",
				"--worker-identity", tc.value}, tc.extra...)
			var out, errb strings.Builder
			code := runArgs(context.Background(), args, &out, &errb)
			if code != 2 || !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("up --worker-identity %q %v: exit %d, stderr:\n%s\nwant exit 2 and %q", tc.value, tc.extra, code, errb.String(), tc.want)
			}
		})
	}
}

// upRun is `utpmesh up` run in process until its context ends.
type upRun struct {
	cancel context.CancelFunc
	done   chan int
	mu     sync.Mutex
	banner strings.Builder
}

// startUpInProcess runs `utpmesh up args...` in process and returns once
// it printed its banner, with the banner.
func startUpInProcess(t *testing.T, args ...string) (*upRun, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	u := &upRun{cancel: cancel, done: make(chan int, 1)}
	pr, pw := io.Pipe()
	var errb lockedBuffer
	go func() {
		u.done <- run(ctx, append([]string{"up"}, args...), env{stdout: pw, stderr: &errb, getenv: func(string) string { return "" }})
		_ = pw.Close()
	}()
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			u.mu.Lock()
			u.banner.WriteString(sc.Text() + "\n")
			u.mu.Unlock()
			if !sent && strings.HasPrefix(sc.Text(), "Press Ctrl-C") {
				sent = true
				ready <- true
			}
		}
		if !sent {
			ready <- false
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-u.done
	})
	if !<-ready {
		t.Fatalf("up did not come up:\n%s", errb.String())
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u, u.banner.String()
}

// stop ends up as Ctrl-C would and returns its exit code.
func (u *upRun) stop() int {
	u.cancel()
	code := <-u.done
	u.done <- code // for the cleanup
	return code
}

// TestUpWorkerIdentity: `up --worker-identity reverse=reverse,text.upper`
// writes worker-reverse.nk and lists it in the banner; a worker with it
// serves exactly those tools, and may not consume, claim or register
// another tool's (echo's, which up serves).
func TestUpWorkerIdentity(t *testing.T) {
	dir := t.TempDir()
	u, banner := startUpInProcess(t, "--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "",
		"--services", "echo", "--worker-identity", "reverse=reverse,text.upper")
	seed := creds.SeedPath(filepath.Join(dir, "creds"), creds.WorkerName("reverse"))
	wantContains(t, "up's banner", banner, "  worker     "+seed+" serves reverse, text.upper (--worker-identity)")
	if fi, err := os.Stat(seed); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("seed %s: %v, %v; want a 0600 file", seed, fi, err)
	}
	url := regexp.MustCompile(`(?m)^\s+NATS\s+(nats://\S+)`).FindStringSubmatch(banner)
	if url == nil {
		t.Fatalf("no NATS URL in the banner:\n%s", banner)
	}

	// Its own tools: served (durable consumers created, registered).
	wk, err := connectAs(t, url[1], seed)
	if err != nil {
		t.Fatal(err)
	}
	ok := func(ctx context.Context, c *worker.Call) (worker.Result, error) { return worker.OK(nil), nil }
	rt, err := worker.Start(context.Background(), wk.nc, []worker.Tool{{Name: "reverse", Handler: ok}, {Name: "text.upper", Handler: ok}},
		worker.WithProjects("demo"), worker.WithoutAuthorizer(), worker.WithLogger(quietLog))
	if err != nil {
		t.Fatalf("serve its own tools with worker-reverse: %v", err)
	}
	if err := rt.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Another tool's: every step refused by the server.
	v := subjects.DefaultVersion
	cmd := "cg_cmd_" + v
	for _, subj := range []string{
		"$JS.API.CONSUMER.CREATE." + cmd + ".utp_tool_echo.cg." + v + ".*.*.cmd.tool.echo",
		"$JS.API.CONSUMER.MSG.NEXT." + cmd + ".utp_tool_echo",
		"$JS.API.CONSUMER.CREATE." + cmd + ".utp_tool_reverse.cg." + v + ".*.*.cmd.>",
		"cg." + v + ".demo.default.svc.cardstore.claim.echo",
		"cg." + v + ".demo.default.svc.cardstore.put_result.echo",
		"cg." + v + ".demo.default.svc.registry.put.echo",
	} {
		t.Run(subj, func(t *testing.T) {
			if err := wk.nc.Publish(subj, []byte("{}")); err != nil {
				t.Fatal(err)
			}
			wk.waitViolation(t, "publish", subj)
		})
	}
	if code := u.stop(); code != 0 {
		t.Fatalf("up after Ctrl-C: exit %d", code)
	}
}

// TestUpAgentIdentity: `up --agent-identity demo/alice` writes
// agent-demo.alice.nk, which may dispatch only as alice; a bad value or
// --insecure is a usage error.
func TestUpAgentIdentity(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--agent-identity", "demo"}, "PROJECT/AGENT"},
		{[]string{"--agent-identity", "de mo/alice"}, "project_id"},
		{[]string{"--agent-identity", "demo/alice", "--insecure"}, "--agent-identity needs NATS authentication"},
	} {
		var out, errb strings.Builder
		args := append([]string{"up", "--data", t.TempDir(), "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", ""}, tc.args...)
		if code := runArgs(context.Background(), args, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Fatalf("up %v: exit %d, stderr:\n%s\nwant exit 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
	dir := t.TempDir()
	u, banner := startUpInProcess(t, "--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "",
		"--services", "echo", "--agent-identity", "demo/alice")
	url := regexp.MustCompile(`(?m)^\s+NATS\s+(nats://\S+)`).FindStringSubmatch(banner)
	if url == nil {
		t.Fatalf("no NATS URL in the banner:\n%s", banner)
	}
	alice, err := connectAs(t, url[1], creds.SeedPath(filepath.Join(dir, "creds"), "agent-demo.alice"))
	if err != nil {
		t.Fatal(err)
	}
	v := subjects.DefaultVersion
	alice.allowed(t, "cg."+v+".demo.main.svc.dispatch.call.alice")
	bob := "cg." + v + ".demo.main.svc.dispatch.call.bob"
	if err := alice.nc.Publish(bob, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	alice.waitViolation(t, "publish", bob)
	if code := u.stop(); code != 0 {
		t.Fatalf("up after Ctrl-C: exit %d", code)
	}
}
