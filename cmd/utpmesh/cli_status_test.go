package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

func TestCLIStatus(t *testing.T) {
	cm := startCLIMesh(t)
	cm.must(t, 0, "call", "echo", "--agent", "agent-s", "--turn", "t-s", "--wait=false")

	rep := decodeJSON[statusReport](t, cm.must(t, 0, "status", "--json", "--agent", "agent-s").stdout)
	if rep.Stream == nil || rep.Stream.Name != "cg_cmd_v1r3" || rep.Stream.Messages == 0 {
		t.Fatalf("stream = %+v", rep.Stream)
	}
	names := map[string]consumerStatus{}
	for _, c := range rep.Consumers {
		names[c.Name] = c
	}
	for _, n := range []string{"utp_tool_echo", "utp_tool_counter", "utp_inbox"} {
		if _, ok := names[n]; !ok {
			t.Fatalf("status lacks consumer %s: %+v", n, rep.Consumers)
		}
	}
	if f := names["utp_tool_echo"].FilterSubjects; len(f) != 1 || f[0] != "cg.v1r3.*.*.cmd.tool.echo" {
		t.Fatalf("echo filter = %v", f)
	}
	if len(rep.Inbox.Agents) != 1 || rep.Inbox.Agents[0].AgentID != "agent-s" {
		t.Fatalf("inbox = %+v", rep.Inbox)
	}
	// Every worker process answers micro discovery: a second runtime
	// serving echo makes two workers of echo, one of counter.
	rt, err := worker.New(cm.m.Conn(), worker.Config{Store: cm.m.Cards(), Registry: cm.m.Registry(),
		InstanceID: "second", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, echo.Tool())
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Stop(context.Background()) })
	rep = decodeJSON[statusReport](t, cm.must(t, 0, "status", "--json").stdout)
	tools := map[string]int{}
	for _, ts := range rep.Tools {
		tools[ts.Tool] = ts.Workers
	}
	if len(rep.Workers) != 2 || tools["echo"] != 2 || tools["counter"] != 1 {
		t.Fatalf("workers = %+v, tools = %+v; want 2 workers, echo on 2, counter on 1", rep.Workers, rep.Tools)
	}

	r := cm.must(t, 0, "status")
	wantContains(t, "status", r.stdout, "stream cg_cmd_v1r3: ", "CONSUMER", "utp_tool_echo", "inbox: ")

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"positional", []string{"status", "x"}, "status takes flags only"},
		{"bad agent", []string{"status", "--agent", "a.b"}, "--agent"},
		{"wrong protocol", []string{"status", "--protocol", "v9"}, "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code := 2
			if tc.name == "wrong protocol" {
				code = 1
			}
			r := cm.must(t, code, tc.args...)
			wantContains(t, "stderr", r.stderr, tc.want)
		})
	}
}
