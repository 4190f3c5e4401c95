package main

import (
	"context"
	"fmt"
	"strings"
)

// sub is one subcommand of a command group ("utpmesh tools ls").
type sub struct {
	// names are the subcommand's name and its aliases; names[0] is shown.
	names []string
	run   func(ctx context.Context, args []string) error
}

// dispatch runs the subcommand args[0] of the group name: with no
// subcommand it prints usage and fails (exit 2), with --help it prints
// usage (exit 0), and an unknown one gets a did-you-mean.
func dispatch(ctx context.Context, e env, name, usage string, subs []sub, args []string) error {
	shown := make([]string, len(subs))
	for i, s := range subs {
		shown[i] = s.names[0]
	}
	list := strings.Join(shown[:len(shown)-1], ", ") + " or " + shown[len(shown)-1]
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stdout, usage)
		if len(args) == 0 {
			return usagef("name a subcommand: %s", list)
		}
		return &usageError{msg: "help", help: true}
	}
	for _, s := range subs {
		for _, n := range s.names {
			if n == args[0] {
				return s.run(ctx, args[1:])
			}
		}
	}
	msg := fmt.Sprintf("unknown subcommand %q", args[0])
	if s := closest(args[0], shown); s != "" {
		msg += fmt.Sprintf("; did you mean 'utpmesh %s %s'?", name, s)
	}
	return usagef("%s (use %s)", msg, list)
}
