// Command utpmesh runs and operates a UTP tool-service mesh on NATS.
//
//	utpmesh up       run a whole mesh in one process (embedded NATS)
//	utpmesh worker   serve tool services against an existing NATS
//	utpmesh version  print the version
//
// Exit codes: 0 success, 1 failure, 2 bad usage.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strings"
	"syscall"

	"github.com/utpmesh/utpmesh/subjects"
)

// Version is set at build time with -ldflags "-X main.Version=…".
var Version = "0.1.0-dev"

// command is one subcommand.
type command interface {
	Run(ctx context.Context, args []string) error
}

type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal starts the drain; giving the signals back to
		// the runtime then makes a second one end the process at once,
		// should the drain hang.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv})
	stop()
	os.Exit(code)
}

// spec describes one subcommand. Each subcommand's file registers its spec
// in an init function, so adding a subcommand touches no other file.
type spec struct {
	// name is what the user types after utpmesh.
	name string
	// summary is the one-line description in 'utpmesh --help'.
	summary string
	// order places the command in the help listing (lower first).
	order int
	// make returns the command bound to the process environment.
	make func(env) command
}

var specs = map[string]spec{}

// register adds a subcommand; it is called from init functions.
func register(s spec) {
	if _, dup := specs[s.name]; dup {
		panic("utpmesh: subcommand registered twice: " + s.name)
	}
	specs[s.name] = s
}

func init() {
	register(spec{name: "up", order: 10, summary: "run a whole mesh in one process (embedded NATS + JetStream)",
		make: func(e env) command { return &upCommand{env: e} }})
	register(spec{name: "worker", order: 20, summary: "serve tool services against an existing NATS (scale one tool)",
		make: func(e env) command { return &workerCommand{env: e} }})
	register(spec{name: "version", order: 1000, summary: "print the version",
		make: func(e env) command { return &versionCommand{env: e} }})
}

func commands(e env) map[string]command {
	out := make(map[string]command, len(specs))
	for n, s := range specs {
		out[n] = s.make(e)
	}
	return out
}

func usage() string {
	list := make([]spec, 0, len(specs))
	for _, s := range specs {
		list = append(list, s)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].order != list[j].order {
			return list[i].order < list[j].order
		}
		return list[i].name < list[j].name
	})
	var b strings.Builder
	b.WriteString("utpmesh runs and operates a UTP tool-service mesh on NATS.\n\nUsage:\n  utpmesh <command> [flags]\n\nCommands:\n")
	for _, s := range list {
		fmt.Fprintf(&b, "  %-9s %s\n", s.name, s.summary)
	}
	b.WriteString("\nRun 'utpmesh <command> --help' for a command's flags.\n")
	return b.String()
}

func run(ctx context.Context, args []string, e env) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stdout, usage())
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmds := commands(e)
	cmd, ok := cmds[args[0]]
	if !ok {
		names := make([]string, 0, len(cmds))
		for n := range cmds {
			names = append(names, n)
		}
		msg := fmt.Sprintf("utpmesh: unknown command %q", args[0])
		if s := closest(args[0], names); s != "" {
			msg += fmt.Sprintf("; did you mean 'utpmesh %s'?", s)
		}
		fmt.Fprintln(e.stderr, msg)
		fmt.Fprintln(e.stderr, "Run 'utpmesh --help' for the list of commands.")
		return 2
	}
	err := cmd.Run(ctx, args[1:])
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		if ue.help {
			return 0
		}
		fmt.Fprintln(e.stderr, "utpmesh "+args[0]+": "+ue.Error())
		return 2
	default:
		fmt.Fprintln(e.stderr, "utpmesh "+args[0]+": "+err.Error())
		return 1
	}
}

type versionCommand struct{ env env }

// versionInfo is what 'utpmesh version --json' prints.
type versionInfo struct {
	// Version is the CLI's version (Version).
	Version string `json:"version"`
	// Protocol is the UTP version token of the subjects it speaks.
	Protocol string `json:"protocol"`
	// Go is the Go version it was built with.
	Go string `json:"go"`
}

func (c *versionCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("version", "utpmesh version [--json]", c.env)
	asJSON := fs.Bool("json", false, `print {"version", "protocol", "go"} as JSON`)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q (version takes only --json)", pos[0])
	}
	if *asJSON {
		return writeJSON(c.env.stdout, versionInfo{Version: Version, Protocol: subjects.DefaultVersion, Go: runtime.Version()})
	}
	fmt.Fprintln(c.env.stdout, "utpmesh", Version)
	return nil
}
