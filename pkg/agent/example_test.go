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

// Park a turn against 'utpmesh up': dispatch, consume wakeups durably, and
// pick the turn up again with Resume. It reads the agent credentials and
// the demo mandate up writes under its data directory; it needs a running
// mesh, so it is compiled, not run.
func ExampleClient_Dispatch() {
	opt, err := creds.Option(creds.SeedPath(creds.DefaultDir, creds.AgentName("demo")))
	if err != nil {
		log.Fatal(err)
	}
	token, err := os.ReadFile("utpmesh-data/demo-mandate.jwt") // utpmesh up --data utpmesh-data
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(nats.DefaultURL, opt)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := agent.New(nc, agent.Config{Project: "demo", AgentID: "demo-agent",
		Mandate: strings.TrimSpace(string(token))})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	stop, err := c.Wakeups(ctx, func(w agent.Wakeup) error {
		st, err := c.Resume(ctx, w.AgentTurnID)
		if err != nil {
			return err // redelivered later
		}
		for _, u := range st.Unconsumed {
			fmt.Println(u.ToolCallID, u.Result.Status)
			if u.Entry != nil {
				if _, err := c.Ack(ctx, u.Entry.InboxID); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	if _, err := c.Dispatch(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: "turn-7"}); err != nil {
		log.Fatal(err)
	}
}
