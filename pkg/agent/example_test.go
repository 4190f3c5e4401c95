package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// Call a tool and wait for its result, as an agent runtime of its own
// process: connect with the project's agent credentials and attach a signed
// mandate, since the mesh's gate refuses a call without one. Against
// 'utpmesh up' both exist already: the seed in utpmesh-data/creds/agent-demo.nk
// and the mandate in utpmesh-data/demo-mandate.jwt (ExampleClient_Dispatch
// reads them). Here a mesh like up's — identities and the Cedar gate on,
// echo served — is started first, so that the example runs.
func ExampleClient_Call() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "utpmesh-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Auth:   &mesh.AuthConfig{}, Identities: &mesh.IdentityConfig{},
		Tools: []worker.Tool{echo.Tool()}})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = m.Stop(context.Background()) }()
	// The project's policy, and a mandate its issuer signs for the agent.
	policy := `permit(principal, action == Action::"echo", resource in Project::"demo");`
	if _, err := m.Auth().Store.PutPolicies(ctx, "demo", policy); err != nil {
		log.Fatal(err)
	}
	key, _, err := m.Auth().Keys.Ensure(ctx, "demo")
	if err != nil {
		log.Fatal(err)
	}
	now := time.Now()
	token, err := mandate.Issue(key, mandate.Claims{Subject: "researcher", ExpiresAt: now.Add(time.Hour).Unix(),
		Mandate: mandate.Grant{PolicySet: policy}}, now)
	if err != nil {
		log.Fatal(err)
	}

	// The agent runtime.
	opt, err := creds.Option(creds.SeedPath(m.CredsDir(), creds.AgentName("demo")))
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(m.ClientURL(), opt)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := agent.New(nc, agent.Config{Project: "demo", AgentID: "researcher", Mandate: token})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := c.Call(cctx, agent.CallRequest{
		ToolName:    "echo",
		Arguments:   json.RawMessage(`{"msg":"hello"}`),
		AgentTurnID: "turn-42",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Result.Status, string(out.Result.Result), out.AfterExecution)
	// Output: success {"msg":"hello"} suspend
}

// Park a turn against 'utpmesh up' and pick it up again, as an agent
// runtime of its own process beside a local up: it connects with the
// project's agent identity and the demo mandate that up writes under its
// data directory ($NATS_URL, else the local default). Dispatch sends the
// call and returns at once; Wakeups consumes the project's durable wakeup
// consumer, which up made for the project's agent identity (a wakeup that
// came while the runtime was away waits there), and says a result is
// there; Resume reads the turn from the CardStore and the inbox, and Ack
// marks the result consumed. A runtime that restarts calls Resume for its
// parked turns first: results that came while it was away are among
// Unconsumed. It needs a running mesh, so go test compiles it and
// cmd/utpmesh TestAgentExampleAgainstUp runs it against a real up.
func ExampleClient_Dispatch() {
	url := os.Getenv("NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	opt, err := creds.Option(creds.SeedPath(creds.DefaultDir, creds.AgentName("demo")))
	if err != nil {
		log.Fatal(err)
	}
	token, err := os.ReadFile("utpmesh-data/demo-mandate.jwt") // utpmesh up --data utpmesh-data
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(url, opt)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := agent.New(nc, agent.Config{Project: "demo", AgentID: "demo-agent",
		Mandate: strings.TrimSpace(string(token))})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	turn := fmt.Sprintf("turn-%d", time.Now().UnixNano())
	// Every agent's wakeups of the project, on the durable the mesh made for
	// agent-demo.nk (a per-agent identity, agent-demo.<agent>.nk, binds its
	// agent's with no option).
	woken := make(chan struct{}, 1)
	stop, err := c.Wakeups(ctx, func(w agent.Wakeup) error {
		if w.AgentID == c.AgentID() && w.AgentTurnID == turn {
			select {
			case woken <- struct{}{}:
			default:
			}
		}
		return nil // acknowledged: the inbox entry, not the wakeup, is the state
	}, agent.WithProjectWakeups())
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = stop() }()
	if _, err := c.Dispatch(ctx, agent.CallRequest{ToolName: "echo", Arguments: json.RawMessage(`{"msg":"parked"}`),
		AgentTurnID: turn}); err != nil {
		log.Fatal(err)
	}
	// The turn is parked; here the runtime could stop and, once started
	// again, go on from this loop.
	for {
		st, err := c.Resume(ctx, turn)
		if err != nil {
			log.Fatal(err)
		}
		acked := 0
		for _, u := range st.Unconsumed {
			if u.Entry == nil {
				continue // the inbox has not stored the report yet; its wakeup follows
			}
			fmt.Println(u.Result.Status, string(u.Result.Result))
			if _, err := c.Ack(ctx, u.Entry.InboxID); err != nil {
				log.Fatal(err)
			}
			acked++
		}
		if acked > 0 {
			return
		}
		select {
		case <-woken:
		case <-ctx.Done():
			log.Fatal("no result within a minute: is echo served?")
		}
	}
}
