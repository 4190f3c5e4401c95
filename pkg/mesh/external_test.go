package mesh_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/mesh/externaltest"
	"github.com/utpmesh/utpmesh/pkg/mesh/natsconf"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
	"github.com/utpmesh/utpmesh/subjects"
)

// roleIDs are the identities of the deployments of these tests.
var roleIDs = []meshauth.Identity{{Role: meshauth.RoleCore}, {Role: meshauth.RoleAgent, Project: "demo", RawCommands: true},
	{Role: meshauth.RoleWorker, Service: "reverse", Tools: []meshauth.Tool{{Name: "reverse", Target: "reverse"}}}}

// deployment is a deployment of nodes whose users are roleIDs with the
// permissions an embedded mesh gives them (meshauth.Permissions).
func deployment(nodes int, jwt bool) externaltest.Options {
	o := externaltest.Options{Nodes: nodes, JWT: jwt, Permissions: func(name, key string) (*server.Permissions, error) {
		for _, id := range roleIDs {
			if id.Name() == name {
				id.Key = key // its reply inboxes are under the key
				return meshauth.Permissions(subjects.DefaultVersion, id), nil
			}
		}
		return nil, fmt.Errorf("no identity %s", name)
	}}
	for _, id := range roleIDs {
		o.Users = append(o.Users, natsconf.User{Name: id.Name()})
	}
	return o
}

// connectAs connects to the deployment as the user named name.
func connectAs(t *testing.T, d *externaltest.Deployment, name string) *nats.Conn {
	t.Helper()
	opt, err := creds.Option(d.Creds(name))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(d.URL(), opt, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func externalMesh(t *testing.T, d *externaltest.Deployment, dir string) *mesh.Mesh {
	t.Helper()
	opt, err := creds.Option(d.Creds(meshauth.RoleCore))
	if err != nil {
		t.Fatal(err)
	}
	m, err := mesh.Start(context.Background(), mesh.Config{DataDir: dir, Logger: quiet, Tools: []worker.Tool{echo.Tool()},
		External: &mesh.ExternalConfig{URL: d.URL(), Options: []nats.Option{opt}}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func callOK(t *testing.T, ac *agent.Client, tool, turn, args string) *agent.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := ac.Call(ctx, agent.CallRequest{ToolName: tool, AgentTurnID: turn, Arguments: json.RawMessage(args)})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if out.Result.Status != card.StatusSuccess {
		t.Fatalf("%s: %s %s", tool, out.Result.Status, out.Result.Result)
	}
	return out
}

// TestExternalCluster runs the mesh on three separately started
// nats-servers in operator mode (accounts/JWT, .creds files, a JetStream
// domain): the mesh connects as the core user and keeps its state R3; an
// agent user with the agent role's permissions calls echo, served by the
// mesh, and reverse, served by a worker user with the worker role's
// permissions; a restarted mesh finds the results.
func TestExternalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster")
	}
	d := externaltest.Start(t, deployment(3, true))
	dir := t.TempDir()
	m := externalMesh(t, d, dir)
	if r := m.Config().Replicated; r == nil || r.Replicas != 3 {
		t.Fatalf("replicas = %+v, want 3 on a cluster", r)
	}
	if m.NATS() != nil || m.ClientURL() != d.URL() {
		t.Fatalf("NATS() = %v, ClientURL() = %q; want no embedded server and the deployment's URL", m.NATS(), m.ClientURL())
	}
	js, _ := jetstream.New(m.Conn())
	st, err := js.Stream(context.Background(), streams.CommandStream(subjects.DefaultVersion))
	if err != nil || st.CachedInfo().Config.Replicas != 3 {
		t.Fatalf("command stream: %v, want 3 replicas", err)
	}

	// The mesh makes the worker user's durable as a pull consumer first;
	// its create permission (its tool's filter) then cannot turn it into a
	// push consumer delivering on a subject of its choosing.
	if err := m.ExternalWorkers(roleIDs[2]); err != nil {
		t.Fatal(err)
	}
	ver, cmdStream := subjects.DefaultVersion, streams.CommandStream(subjects.DefaultVersion)
	body, _ := json.Marshal(map[string]any{"stream_name": cmdStream, "config": map[string]any{"durable_name": "utp_tool_reverse",
		"filter_subject": "cg." + ver + ".*.*.cmd.tool.reverse", "ack_policy": "explicit", "deliver_subject": "cg." + ver + ".demo.main.cmd.agent.victim.wakeup"}})
	msg, err := connectAs(t, d, creds.WorkerName("reverse")).Request("$JS.API.CONSUMER.CREATE."+cmdStream+".utp_tool_reverse.cg."+ver+".*.*.cmd.tool.reverse", body, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var reply struct {
		Error *struct{ Description string } `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &reply); err != nil || reply.Error == nil || !strings.Contains(reply.Error.Description, "push") {
		t.Fatalf("the worker user's push consumer create = %s, want refused", msg.Data)
	}
	if err := m.ExternalWorkers(roleIDs[1]); !errors.Is(err, mesh.ErrExternal) {
		t.Fatalf("ExternalWorkers(an agent) = %v, want ErrExternal", err)
	}

	// A worker program with the worker role's user.
	reverse := worker.Tool{Name: "reverse", Parameters: json.RawMessage(`{"type":"object","properties":{"s":{"type":"string"}},"required":["s"]}`),
		Handler: func(_ context.Context, c *worker.Call) (worker.Result, error) {
			var a struct{ S string }
			_ = json.Unmarshal(c.Arguments, &a)
			r := []rune(a.S)
			slices.Reverse(r)
			return worker.Result{Value: map[string]string{"s": string(r)}}, nil
		}}
	rt, err := worker.Start(context.Background(), connectAs(t, d, creds.WorkerName("reverse")), []worker.Tool{reverse},
		worker.WithProjects("demo"), worker.WithLogger(quiet), worker.WithoutAuthorizer())
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Stop(context.Background())

	ac, err := agent.New(connectAs(t, d, creds.AgentName("demo")), agent.Config{Project: "demo", Channel: "main", AgentID: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	first := callOK(t, ac, "echo", "turn-x1", `{"n":1}`)
	if out := callOK(t, ac, "reverse", "turn-x1", `{"s":"abc"}`); !strings.Contains(string(out.Result.Result), `"cba"`) {
		t.Fatalf("reverse = %s", out.Result.Result)
	}
	// The deployment enforces the role: the agent's user may not read
	// tool commands (the worker role's).
	violation := make(chan error, 4)
	opt, _ := creds.Option(d.Creds(creds.AgentName("demo")))
	snoop, err := nats.Connect(d.URL(), opt, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violation <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer snoop.Close()
	if _, err := snoop.SubscribeSync("cg." + subjects.DefaultVersion + ".demo.main.cmd.tool.>"); err != nil {
		t.Fatal(err)
	}
	_ = snoop.Flush()
	if err := <-violation; !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("agent subscribing to tool commands: %v, want a permissions violation", err)
	}

	if err := m.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	m2 := externalMesh(t, d, dir)
	defer m2.Stop(context.Background())
	rc, err := m2.Cards().FindToolResult(context.Background(), "demo", "turn-x1", first.Call.ToolCallID)
	if err != nil || rc.CardID != first.ResultCard.CardID {
		t.Fatalf("after a restart, the echo result: %v, %v; want card %s", rc, err, first.ResultCard.CardID)
	}
	callOK(t, ac, "echo", "turn-x2", `{"n":2}`)
}

// TestExternalSingleServer: one server with nkey users in its
// configuration file (seed files): the mesh keeps its state R1, and its
// /healthz answers 503 once the server is gone.
func TestExternalSingleServer(t *testing.T) {
	d := externaltest.Start(t, deployment(1, false))
	opt, err := creds.Option(d.Creds(meshauth.RoleCore))
	if err != nil {
		t.Fatal(err)
	}
	m, err := mesh.Start(context.Background(), mesh.Config{DataDir: t.TempDir(), Logger: quiet, Tools: []worker.Tool{echo.Tool()},
		MetricsAddr: "127.0.0.1:0", External: &mesh.ExternalConfig{URL: d.URL(), Options: []nats.Option{opt}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(context.Background())
	base := strings.TrimSuffix(m.MetricsURL(), "/metrics")
	for _, p := range []string{"/healthz", "/readyz"} {
		if code := httpStatus(t, base+p); code != http.StatusOK {
			t.Fatalf("%s = %d, want 200", p, code)
		}
	}
	defer func() {
		d.Stop()
		for _, p := range []string{"/healthz", "/readyz"} {
			for deadline := time.Now().Add(30 * time.Second); httpStatus(t, base+p) != http.StatusServiceUnavailable; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s still not 503 30 s after the server stopped", p)
				}
			}
		}
	}()
	if r := m.Config().Replicated; r == nil || r.Replicas != 1 {
		t.Fatalf("replicas = %+v, want 1 on one server", r)
	}
	ac, err := agent.New(connectAs(t, d, creds.AgentName("demo")), agent.Config{Project: "demo", Channel: "main", AgentID: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	callOK(t, ac, "echo", "turn-s1", `{"n":1}`)
}

// TestExternalRefused: what the mesh cannot join is refused with an error
// naming what to change.
func TestExternalRefused(t *testing.T) {
	o := deployment(1, false)
	o.MaxPayload = 1 << 20
	small := externaltest.Start(t, o)
	nojs := externaltest.Start(t, externaltest.Options{Nodes: 1, Open: true, NoJetStream: true})
	stranger := filepath.Join(t.TempDir(), "stranger.nk")
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	if err := os.WriteFile(stranger, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	opt := func(path string) nats.Option {
		o, err := creds.Option(path)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	ext := func(path string) *mesh.ExternalConfig {
		return &mesh.ExternalConfig{URL: small.URL(), Options: []nats.Option{opt(path)}}
	}
	tests := []struct {
		name string
		cfg  mesh.Config
		want string
	}{
		{"identities", mesh.Config{External: ext(small.Creds("core")), Identities: &mesh.IdentityConfig{}}, "mints no nkeys"},
		{"listen", mesh.Config{External: ext(small.Creds("core")), Listen: "127.0.0.1:0"}, "Listen"},
		{"no url", mesh.Config{External: &mesh.ExternalConfig{}}, "URL is empty"},
		{"no server", mesh.Config{External: &mesh.ExternalConfig{URL: "nats://u:secret@127.0.0.1:1", ConnectWait: time.Millisecond}}, "connect to nats://u:xxxxx@127.0.0.1:1"},
		{"unknown user", mesh.Config{External: ext(stranger)}, "credentials were refused"},
		{"no JetStream", mesh.Config{External: &mesh.ExternalConfig{URL: nojs.URL()}}, "enable it on every server (jetstream { store_dir: … }) and for the mesh's account"},
		{"small max_payload", mesh.Config{External: ext(small.Creds("core"))}, "max_payload: 8MB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir, tc.cfg.Logger = t.TempDir(), quiet
			m, err := mesh.Start(context.Background(), tc.cfg)
			if err == nil {
				m.Stop(context.Background())
				t.Fatalf("Start succeeded, want an error containing %q", tc.want)
			}
			if !errors.Is(err, mesh.ErrExternal) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start = %v; want mesh.ErrExternal containing %q", err, tc.want)
			}
		})
	}
}

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
