package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// reverse is a tool: a registry definition and a handler.
var reverse = worker.Tool{
	Name:        "reverse",
	Description: "Reverses a string.",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
	Handler: func(ctx context.Context, call *worker.Call) (worker.Result, error) {
		var args struct {
			Text string `json:"text"`
		}
		if err := call.Bind(&args); err != nil {
			return worker.Result{}, err
		}
		r := []rune(args.Text)
		for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
			r[i], r[j] = r[j], r[i]
		}
		return worker.OK(string(r)), nil
	},
}

// Serve a tool to a running mesh from a program of its own: connect with
// the worker identity's credentials, gate the calls as 'utpmesh up' does
// (worker.Serve blocks until its context ends; worker.Start, used here,
// returns once the tool is registered and served). The mesh, its
// policy and the agent's mandate are set up here so that the example
// runs; against 'utpmesh up' they exist already.
func ExampleStart() {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir, err := os.MkdirTemp("", "utpmesh-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The mesh, as 'utpmesh up' runs it: NATS identities and the Cedar
	// gate, a worker identity for the service "reverse".
	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet,
		Auth: &mesh.AuthConfig{}, Identities: &mesh.IdentityConfig{}})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = m.Stop(context.Background()) }()
	if err := m.AddIdentities(meshauth.Identity{Role: meshauth.RoleWorker, Service: "reverse",
		Tools: []meshauth.Tool{{Name: "reverse", Target: "reverse"}}}); err != nil {
		log.Fatal(err)
	}

	// The tool's program: its own connection, with its credentials.
	opt, err := creds.Option(creds.SeedPath(m.CredsDir(), creds.WorkerName("reverse")))
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(m.ClientURL(), opt)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	gate, err := natsauthz.NewRemoteGate(nc, natsauthz.RemoteConfig{})
	if err != nil {
		log.Fatal(err)
	}
	rt, err := worker.Start(ctx, nc, []worker.Tool{reverse},
		worker.WithProjects("demo"), worker.WithAuthorizer(gate), worker.WithLogger(quiet))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = rt.Stop(context.Background()) }()

	// The project's policy and an agent's mandate permit the call.
	policy := `permit(principal, action == Action::"reverse", resource in Project::"demo");`
	if _, err := m.Auth().Store.PutPolicies(ctx, "demo", policy); err != nil {
		log.Fatal(err)
	}
	key, _, err := m.Auth().Keys.Ensure(ctx, "demo")
	if err != nil {
		log.Fatal(err)
	}
	now := time.Now()
	tok, err := mandate.Issue(key, mandate.Claims{Subject: "example-agent", ExpiresAt: now.Add(time.Hour).Unix(),
		Mandate: mandate.Grant{PolicySet: policy}}, now)
	if err != nil {
		log.Fatal(err)
	}

	// An agent calls the tool.
	aopt, err := creds.Option(creds.SeedPath(m.CredsDir(), creds.AgentName("demo")))
	if err != nil {
		log.Fatal(err)
	}
	anc, err := nats.Connect(m.ClientURL(), aopt)
	if err != nil {
		log.Fatal(err)
	}
	defer anc.Close()
	ac, err := agent.New(anc, agent.Config{Project: "demo", AgentID: "example-agent", Mandate: tok})
	if err != nil {
		log.Fatal(err)
	}
	defer ac.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := ac.Call(cctx, agent.CallRequest{ToolName: "reverse", AgentTurnID: "turn-1",
		Arguments: json.RawMessage(`{"text":"stressed"}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Result.Status, string(out.Result.Result))
	// Output: success "desserts"
}
