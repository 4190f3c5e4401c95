package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore/jsstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/jspolicy"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/inbox/kvinbox"
	"github.com/utpmesh/utpmesh/pkg/mesh/externaltest"
	"github.com/utpmesh/utpmesh/pkg/mesh/natsconf"
	"github.com/utpmesh/utpmesh/pkg/registry/jsreg"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/subjects"
)

// runBare runs `utpmesh args...` in process with no environment.
func runBare(args ...string) result {
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := run(ctx, args, env{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }})
	return result{code, out.String(), errb.String()}
}

// docRoles are the roles docs/cluster.md lists and the deployments of
// these tests are made of.
var docRoles = []string{"core", "admin", "operator", "agent-demo", "worker-echo", "worker-atlas.tasks"}

// docDeployment is a three-node operator-mode deployment whose users are
// docRoles with the permissions 'utpmesh nats-permissions' prints for the
// keys the deployment makes.
func docDeployment(t *testing.T) externaltest.Options {
	t.Helper()
	role := map[string]string{} // user name → role
	var users []natsconf.User
	for _, r := range docRoles {
		id, _, err := roleIdentity(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		role[id.Name()] = r
		users = append(users, natsconf.User{Name: id.Name()})
	}
	return externaltest.Options{Nodes: 3, JWT: true, Users: users, Permissions: func(name, key string) (*server.Permissions, error) {
		us, err := roleUsers(context.Background(), subjects.DefaultVersion, []string{role[name]}, true, func(string) (string, error) { return key, nil })
		if err != nil {
			return nil, err
		}
		return us[0].Permissions, nil
	}}
}

// waitReady waits for up's "mesh ready" log line, failing if the process
// exits first.
func waitReady(t *testing.T, p *proc) {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case l := <-p.seen:
			if strings.Contains(l, "mesh ready") {
				return
			}
		case <-deadline:
			p.mu.Lock()
			defer p.mu.Unlock()
			t.Fatalf("up --nats not ready after 2 minutes; output:\n%s", strings.Join(p.lines, "\n"))
		}
	}
}

// TestUpJoinsNATS runs `utpmesh up --nats URL --creds core.creds` against
// three separately started nats-servers in operator mode (accounts/JWT,
// a JetStream domain) whose users have the permissions 'utpmesh
// nats-permissions' prints: an agent user calls echo and ATLAS; up is
// stopped and started again and finds its state.
func TestUpJoinsNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster and up twice")
	}
	d := externaltest.Start(t, docDeployment(t))
	data := filepath.Join(t.TempDir(), "data")
	args := []string{"up", "--nats", d.URL(), "--creds", d.Creds("core"), "--data", data,
		"--metrics-addr", "", "--ui-listen", "", "--services", "echo,atlas.tasks"}
	up := startProc(t, args...)
	waitReady(t, up)
	tok, err := os.ReadFile(filepath.Join(data, authz.DemoMandateFile))
	if err != nil {
		t.Fatal(err)
	}
	agentConn := func() *agent.Client {
		opt, err := creds.Option(d.Creds(creds.AgentName("demo")))
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(d.URL(), opt, nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		ac, err := agent.New(nc, agent.Config{Project: "demo", Channel: "main", AgentID: authz.DemoAgent, Mandate: strings.TrimSpace(string(tok))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ac.Close() })
		return ac
	}
	call := func(ac *agent.Client, tool, turn, args string) *agent.Outcome {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := ac.Call(ctx, agent.CallRequest{ToolName: tool, AgentTurnID: turn, Arguments: json.RawMessage(args)})
		if err != nil || out.Result.Status != card.StatusSuccess {
			t.Fatalf("%s: %v %+v", tool, err, out)
		}
		return out
	}
	ac := agentConn()
	echoed := call(ac, "echo", "turn-join", `{"x":1}`)
	call(ac, "TASK_CREATE", "turn-join", `{"title":"joined an existing NATS"}`)

	// Stop up (SIGTERM: drain) and start it again on the same deployment.
	if err := up.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := up.cmd.Wait(); err != nil {
		t.Fatalf("up exited with %v", err)
	}
	up = startProc(t, args...)
	waitReady(t, up)

	list := call(ac, "TASK_LIST", "turn-join-2", `{}`)
	if !strings.Contains(string(list.Result.Result), "joined an existing NATS") {
		t.Fatalf("TASK_LIST after the restart = %s; want the task made before it", list.Result.Result)
	}
	opt, err := creds.Option(d.Creds("admin"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(d.URL(), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cs, err := natsstore.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cs.FindToolResult(context.Background(), "demo", "turn-join", echoed.Call.ToolCallID)
	if err != nil || rc.CardID != echoed.ResultCard.CardID {
		t.Fatalf("echo's result after the restart: %v, %v; want card %s", rc, err, echoed.ResultCard.CardID)
	}
	call(ac, "echo", "turn-join-2", `{"x":2}`)
	if _, err := os.Stat(filepath.Join(data, "creds")); err == nil {
		t.Error("up --nats made a creds directory: it must mint no identities")
	}

	// A second up on the deployment (the same issuer keys) and a worker of
	// atlas.tasks as the worker-atlas_tasks user (a JWT of 5.2 KB: the
	// servers' max_control_line is raised); the first up stops and the
	// calls go on.
	up2 := startProc(t, "up", "--nats", d.URL(), "--creds", d.Creds("core"), "--data", filepath.Join(t.TempDir(), "data2"),
		"--keys-dir", filepath.Join(data, "keys"), "--metrics-addr", "", "--ui-listen", "", "--services", "echo,atlas.tasks")
	waitReady(t, up2)
	wk := startProc(t, "worker", "--nats", d.URL(), "--creds", d.Creds("worker-atlas_tasks"), "--atlas-state", "jetstream",
		"--atlas-state-replicas", "3", "--data", t.TempDir(), "--metrics-addr", "", "atlas.tasks")
	wk.waitLine(t, "worker serving")
	if err := up.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := up.cmd.Wait(); err != nil {
		t.Fatalf("up exited with %v", err)
	}
	call(ac, "echo", "turn-join-3", `{"x":3}`)
	for i := range 4 {
		call(ac, "TASK_CREATE", "turn-join-3", fmt.Sprintf(`{"title":"task %d"}`, i))
	}
	if list := call(ac, "TASK_LIST", "turn-join-3", `{}`); strings.Count(string(list.Result.Result), `"title"`) != 5 {
		t.Fatalf("TASK_LIST with the second up and the worker = %s; want 5 tasks", list.Result.Result)
	}
	wk.mu.Lock()
	for _, l := range wk.lines {
		if strings.Contains(strings.ToLower(l), "permission") {
			t.Errorf("worker: %s", l)
		}
	}
	wk.mu.Unlock()

	// The mesh's state on the cluster has 3 replicas (the cluster's
	// default): the streams, the CardStore, registry, policies, inbox and
	// the ATLAS group's bucket.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ver := subjects.DefaultVersion
	for _, name := range []string{streams.CommandStream(ver), streams.WakeupStream(ver), streams.EventStream(ver), jsstore.DefaultStream,
		"KV_" + jsreg.DefaultBucket, "KV_" + jspolicy.DefaultBucket, "KV_" + kvinbox.DefaultBucket, "KV_atlas_tasks"} {
		st, err := js.Stream(context.Background(), name)
		if err != nil || st.CachedInfo().Config.Replicas != 3 {
			t.Errorf("stream %s: %v, want 3 replicas", name, err)
		}
	}
}

// TestUpNATSInsecure: --insecure joins a deployment without credentials
// (one open server), saying so in the log; the state is R1.
func TestUpNATSInsecure(t *testing.T) {
	d := externaltest.Start(t, externaltest.Options{Nodes: 1, Open: true})
	up := startProc(t, "up", "--nats", d.URL(), "--insecure", "--data", filepath.Join(t.TempDir(), "data"),
		"--metrics-addr", "", "--ui-listen", "", "--services", "echo")
	waitReady(t, up)
	up.mu.Lock()
	defer up.mu.Unlock()
	log := strings.Join(up.lines, "\n")
	if !strings.Contains(log, "--insecure with --nats: joining") || !strings.Contains(log, "replicas=1") {
		t.Fatalf("log lacks the --insecure warning or replicas=1:\n%s", log)
	}
}

// TestUpNATSFlags: up --nats refuses what belongs to an embedded server or
// to identities it would mint, naming what to do instead; nothing starts.
func TestUpNATSFlags(t *testing.T) {
	dir := t.TempDir()
	seed := filepath.Join(dir, "core.nk")
	if err := os.WriteFile(seed, []byte("SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"up", "--data", filepath.Join(dir, "data"), "--metrics-addr", "", "--ui-listen", "", "--nats", "nats://127.0.0.1:1"}
	tests := []struct {
		name  string
		extra []string
		want  string
	}{
		{"no creds", nil, "--nats needs --creds FILE"},
		{"creds without nats", nil, "--creds needs --nats"},
		{"worker identity", []string{"--creds", seed, "--worker-identity", "reverse=reverse"}, "utpmesh nats-permissions worker-SERVICE=TOOL"},
		{"creds dir", []string{"--creds", seed, "--creds-dir", dir}, "mints no nkeys"},
		{"listen", []string{"--creds", seed, "--nats-listen", "127.0.0.1:0"}, "--nats-listen with --nats"},
		{"cluster", []string{"--creds", seed, "--cluster-name", "c"}, "clustered already"},
		{"max payload", []string{"--creds", seed, "--max-payload", "1048576"}, "max_payload"},
		{"state files", []string{"--creds", seed, "--state", "files"}, "--state files with --nats"},
		{"missing creds file", []string{"--creds", filepath.Join(dir, "nope.creds")}, "--creds:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{}, base...), tc.extra...)
			if tc.name == "creds without nats" {
				args = []string{"up", "--data", filepath.Join(dir, "data"), "--creds", seed}
			}
			r := runBare(args...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("utpmesh %s: exit %d, stderr %q; want 2 and %q", strings.Join(args, " "), r.code, r.stderr, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Error("a refused up --nats created its data directory")
	}
}

// TestNATSPermissions: the command prints each role's permissions as a
// configuration nats-server accepts (externaltest starts servers from
// it), refuses unknown roles, and docs/cluster.md shows its output.
func TestNATSPermissions(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"nats-permissions"}, 2, "name at least one role"},
		{[]string{"nats-permissions", "root"}, 2, `unknown role "root"`},
		{[]string{"nats-permissions", "worker-nope"}, 2, `unknown tool service "nope"`},
		{[]string{"nats-permissions", "--format", "yaml", "core"}, 2, "--format"},
		{[]string{"nats-permissions", "--format", "nsc", "--seeds", "x", "core"}, 2, "--seeds needs --format conf"},
		{[]string{"nats-permissions", "agent-demo", "agent-demo"}, 2, "given twice"},
		{[]string{"nats-permissions", "worker-reverse=reverse"}, 0, `"cg.v1r3.*.*.svc.cardstore.put_result.reverse"`},
		{[]string{"nats-permissions", "--format", "nsc", "worker-echo"}, 0, "nsc add user --account MESH --name worker-echo"},
	} {
		r := runBare(tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("utpmesh %s: exit %d, output %q; want %d and %q", strings.Join(tc.args, " "), r.code, r.stdout+r.stderr, tc.code, tc.want)
		}
	}
	seeds := t.TempDir()
	r := runBare(append([]string{"nats-permissions", "--seeds", seeds}, docRoles...)...)
	if r.code != 0 || strings.Contains(r.stdout, "PUBLIC_NKEY_OF") {
		t.Fatalf("--seeds: exit %d, %s %s; want every nkey filled", r.code, r.stdout, r.stderr)
	}
	if _, err := creds.Option(creds.SeedPath(seeds, "worker-atlas_tasks")); err != nil {
		t.Fatalf("--seeds made no usable seed: %v", err)
	}
	checkDocBlocks(t)
}

// docMarker starts a block of docs/cluster.md that is the output of
// 'utpmesh nats-permissions ARGS': the marker line holds ARGS, the fenced
// block after it the output. UTPMESH_UPDATE_DOCS=1 rewrites the blocks.
const docMarker = "<!-- utpmesh nats-permissions "

// checkDocBlocks compares every generated block of docs/cluster.md with
// the command's output, so the doc cannot drift from the permissions.
func checkDocBlocks(t *testing.T) {
	t.Helper()
	const path = "../../docs/cluster.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var out []string
	found := 0
	for i := 0; i < len(lines); i++ {
		out = append(out, lines[i])
		if !strings.HasPrefix(lines[i], docMarker) {
			continue
		}
		found++
		args := strings.Fields(strings.TrimSuffix(strings.TrimPrefix(lines[i], docMarker), "-->"))
		r := runBare(append([]string{"nats-permissions"}, args...)...)
		if r.code != 0 {
			t.Fatalf("%s: utpmesh nats-permissions %s: exit %d: %s", path, strings.Join(args, " "), r.code, r.stderr)
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			t.Fatalf("%s line %d: want a fenced block after the marker", path, i+2)
		}
		end := i + 2
		for end < len(lines) && lines[end] != "```" {
			end++
		}
		got := strings.Join(lines[i+2:end], "\n") + "\n"
		if got != r.stdout {
			if os.Getenv("UTPMESH_UPDATE_DOCS") == "1" {
				t.Logf("%s line %d: rewritten", path, i+1)
			} else {
				t.Errorf("%s line %d: the block differs from 'utpmesh nats-permissions %s' (run the test with UTPMESH_UPDATE_DOCS=1 to rewrite it)", path, i+1, strings.Join(args, " "))
			}
		}
		out = append(out, lines[i+1])
		out = append(out, strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")...)
		i = end - 1
	}
	if found == 0 {
		t.Errorf("%s has no %q block", path, docMarker)
	}
	if os.Getenv("UTPMESH_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
