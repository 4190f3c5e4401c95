package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"

	"github.com/utpmesh/utpmesh/internal/suggest"
)

// usageError is a command-line mistake: exit code 2. help marks --help.
type usageError struct {
	msg  string
	help bool
}

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{msg: fmt.Sprintf(format, a...)} }

// newFlagSet returns a flag set whose errors say what to type instead.
func newFlagSet(name, synopsis string, e env) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, "Usage: %s\n\nFlags:\n", synopsis)
		printFlags(e.stdout, fs)
	}
	return fs
}

// printFlags lists fs's flags as the CLI spells them (--name), each with
// its default once: a usage text that says its default itself ("default
// $NATS_URL or …") gets no second one from the flag package.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if kind != "" {
			line += " " + kind
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		if !saysDefault.MatchString(usage) && !zeroDefault(f) {
			if g, ok := f.Value.(flag.Getter); ok && isString(g.Get()) {
				line += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				line += fmt.Sprintf(" (default %v)", f.DefValue)
			}
		}
		fmt.Fprintln(w, line)
	})
}

// isString reports whether v is a string (a string flag's default is
// quoted).
func isString(v any) bool {
	_, ok := v.(string)
	return ok
}

// saysDefault matches a usage text that names its flag's default.
var saysDefault = regexp.MustCompile(`(?i)\bdefault\b`)

// zeroDefault reports whether f's default is its type's zero value (not
// worth printing, as the flag package does).
func zeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s", "[]":
		return true
	}
	return false
}

// parse parses args, allowing flags before, between and after positional
// arguments (everything after "--" is positional), and returns the
// positional arguments. Flag errors become usage errors with a hint.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseOnce(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseOnce parses args once. A flag mistake becomes a usage error of
// two lines: what was wrong (with a did-you-mean), and where the flags are
// listed; the full usage is printed only for --help.
func parseOnce(fs *flag.FlagSet, args []string) error {
	printUsage := fs.Usage
	fs.Usage = func() {} // the flag package calls it on every error
	err := fs.Parse(args)
	fs.Usage = printUsage
	if err == nil {
		return nil
	}
	if errors.Is(err, flag.ErrHelp) {
		printUsage()
		return &usageError{msg: "help", help: true}
	}
	return usagef("%s\nrun 'utpmesh %s --help' for all flags", flagMistake(fs, err), fs.Name())
}

// flagMistake rewrites an error of the flag package in the CLI's terms
// (--name, not -name) and suggests the nearest flag for an unknown one.
func flagMistake(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if bad, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		bad = strings.TrimLeft(bad, "-")
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		msg = fmt.Sprintf("unknown flag --%s", bad)
		if s := closest(bad, names); s != "" {
			msg += fmt.Sprintf("; did you mean --%s?", s)
		}
		return msg
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		name = strings.TrimLeft(name, "-")
		if f := fs.Lookup(name); f != nil {
			return fmt.Sprintf("--%s needs a value: %s", name, f.Usage)
		}
		return fmt.Sprintf("--%s needs a value", name)
	}
	if m := invalidValue.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("--%s %s: %s", m[2], m[1], m[3])
		if f := fs.Lookup(m[2]); f != nil {
			msg += fmt.Sprintf("; --%s is: %s", m[2], f.Usage)
		}
	}
	return msg
}

// invalidValue matches the flag package's bad-value errors.
var invalidValue = regexp.MustCompile(`^invalid (?:boolean )?value (".*") for (?:flag )?-(\S+): (.*)$`)

// closest returns the candidate nearest to s, if near enough to be a typo.
func closest(s string, candidates []string) string {
	return suggest.Nearest(s, candidates, suggest.Limit(len(s), 2), false)
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// logFlags are the logging flags every long-running command takes.
type logFlags struct {
	format string
	level  string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(l.level)); err != nil {
		return nil, usagef("--log-level %q: use debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format %q: use text or json", l.format)
}

// natsURL is the default of --nats: $NATS_URL, else the local default.
func natsURL(e env) string {
	if u := e.getenv("NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// newMeshFlagSet is the preamble of a command that talks to a running mesh:
// a flag set (newFlagSet) with the connection flags registered.
func newMeshFlagSet(name, synopsis string, e env) (*flag.FlagSet, *meshFlags) {
	fs := newFlagSet(name, synopsis, e)
	mf := new(meshFlags)
	mf.register(fs, e)
	return fs, mf
}

// newProjectFlagSet is newMeshFlagSet with the project flags (--project,
// --channel) registered too: the preamble of a command about one project.
func newProjectFlagSet(name, synopsis string, e env) (*flag.FlagSet, *meshFlags, *projectFlags) {
	fs, mf := newMeshFlagSet(name, synopsis, e)
	pf := new(projectFlags)
	pf.register(fs)
	mf.project = &pf.project
	return fs, mf, pf
}

// splitSubcommand splits "SUB ARGS..." of a command whose subcommands share
// one usage text. With no arguments it prints the usage and returns a usage
// error naming the subcommands (want); with --help it prints the usage and
// returns the help error (exit 0).
func splitSubcommand(args []string, usage, want string, e env) (string, []string, error) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(e.stdout, "Usage:\n"+usage)
		if len(args) == 0 {
			return "", nil, usagef("%s", want)
		}
		return "", nil, &usageError{msg: "help", help: true}
	}
	return args[0], args[1:], nil
}
