package sdk_test

import (
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/internal/gomodtest"
	"github.com/utpmesh/utpmesh/pkg/sdk"
)

const module = gomodtest.Module

// sdkPackages are the packages held to the budget.
var sdkPackages = []string{
	module + "/pkg/agent",
	module + "/pkg/worker",
	module + "/pkg/creds",
}

// forbidden are the server's dependencies no SDK package may pull in
// (import path prefixes).
var forbidden = []string{
	"go.etcd.io/bbolt",
	"github.com/cedar-policy/cedar-go",
	"github.com/nats-io/nats-server",
	"go.opentelemetry.io/",
	"google.golang.org/grpc",
	"google.golang.org/protobuf",
}

func TestDependencyBudget(t *testing.T) {
	for _, pkg := range sdkPackages {
		t.Run(strings.TrimPrefix(pkg, module+"/"), func(t *testing.T) {
			deps := gomodtest.Deps(t, ".", nil, pkg)
			for _, d := range deps {
				for _, f := range forbidden {
					if strings.HasPrefix(d, f) {
						t.Errorf("%s depends on %s, a server dependency (%s) no SDK package may pull in", pkg, d, f)
					}
				}
			}
			if len(deps) > sdk.MaxDeps {
				t.Errorf("%s depends on %d packages outside the standard library, budget %d:\n%s",
					pkg, len(deps), sdk.MaxDeps, strings.Join(deps, "\n"))
			}
		})
	}
}

// externalMain uses every SDK package the way a program outside this module
// would; it is built, not run.
const externalMain = `package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

func main() {
	opt, err := creds.Option(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	nc, err := nats.Connect(nats.DefaultURL, opt)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer nc.Close()
	ctx := context.Background()
	if len(os.Args) > 2 && os.Args[2] == "serve" {
		reverse := worker.Tool{
			Name:        "reverse",
			Description: "Returns its arguments.",
			Parameters:  json.RawMessage("{\"type\":\"object\"}"),
			Handler: func(ctx context.Context, call *worker.Call) (worker.Result, error) {
				return worker.OK(call.Arguments), nil
			},
		}
		if err := worker.Serve(ctx, nc, []worker.Tool{reverse}, worker.WithoutAuthorizer()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	c, err := agent.New(nc, agent.Config{Project: "demo", AgentID: "demo-agent"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	out, err := c.Call(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: "turn-1", Arguments: json.RawMessage("{}")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(out.Result.Status)
}
`

func TestExternalModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module of its own: skipped in -short")
	}
	dir := t.TempDir()
	gomodtest.Write(t, dir, map[string]string{
		"go.mod":  gomodtest.GoMod("example.com/sdkuser", gomodtest.GoVersion(t), gomodtest.Root(t)),
		"main.go": externalMain,
	})
	gomodtest.Build(t, dir, "sdkuser")
	// The built program's dependencies keep the budget too: the SDK does
	// not bring the server in through a path the in-module check misses.
	for _, l := range gomodtest.Deps(t, dir, gomodtest.Env, ".") {
		for _, f := range forbidden {
			if strings.HasPrefix(l, f) {
				t.Errorf("a program importing the SDK depends on %s (%s)", l, f)
			}
		}
	}
}
