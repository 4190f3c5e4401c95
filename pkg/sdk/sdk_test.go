package sdk_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/sdk"
)

const module = "github.com/utpmesh/utpmesh"

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

// goTool is the go command of the toolchain running the test.
func goTool(t *testing.T) string {
	t.Helper()
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command: %v", err)
	}
	return p
}

// run runs the go command in dir and returns its standard output.
func run(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(goTool(t), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return string(out)
}

func TestDependencyBudget(t *testing.T) {
	for _, pkg := range sdkPackages {
		t.Run(strings.TrimPrefix(pkg, module+"/"), func(t *testing.T) {
			out := run(t, ".", nil, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg)
			var deps []string
			for _, l := range strings.Split(out, "\n") {
				if l = strings.TrimSpace(l); l != "" {
					deps = append(deps, l)
				}
			}
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
	root := strings.TrimSpace(run(t, ".", nil, "list", "-m", "-f", "{{.Dir}}"))
	goVersion := strings.TrimSpace(run(t, ".", nil, "list", "-m", "-f", "{{.GoVersion}}"))
	dir := t.TempDir()
	gomod := "module example.com/sdkuser\n\ngo " + goVersion + "\n\n" +
		"require " + module + " v0.0.0-00010101000000-000000000000\n\n" +
		"replace " + module + " => " + root + "\n"
	for name, body := range map[string]string{"go.mod": gomod, "main.go": externalMain} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off"}
	run(t, dir, env, "mod", "tidy")
	run(t, dir, env, "vet", ".")
	run(t, dir, env, "build", "-o", filepath.Join(dir, "sdkuser"), ".")
	// The built program's dependencies keep the budget too: the SDK does
	// not bring the server in through a path the in-module check misses.
	out := run(t, dir, env, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
	for _, l := range strings.Split(out, "\n") {
		for _, f := range forbidden {
			if l != "" && strings.HasPrefix(l, f) {
				t.Errorf("a program importing the SDK depends on %s (%s)", l, f)
			}
		}
	}
}
