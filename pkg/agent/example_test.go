package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/agent"
)

// Call a tool and wait for its result. It needs a running mesh
// (utpmesh up), so it has no Output line and is compiled, not run.
func ExampleClient_Call() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := agent.New(nc, agent.Config{Project: "demo", Channel: "default", AgentID: "researcher"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.Call(ctx, agent.CallRequest{
		ToolName:    "echo",
		Arguments:   json.RawMessage(`{"msg":"hello"}`),
		AgentTurnID: "turn-42",
		TurnEpoch:   1,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Result.Status, string(out.Result.Result), out.AfterExecution)
}

// Park a turn: dispatch, consume wakeups durably, and pick the turn up
// again with Resume.
func ExampleClient_Dispatch() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := agent.New(nc, agent.Config{Project: "demo", AgentID: "planner"})
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
