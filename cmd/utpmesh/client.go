package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/subjects"
)

// meshFlags are the flags of every subcommand that talks to a running mesh
// as a client: where NATS is, the protocol version, and how long a request
// may take.
type meshFlags struct {
	url     string
	version string
	timeout time.Duration
	json    bool
}

// register adds --nats, --protocol, --timeout and --json to fs.
func (m *meshFlags) register(fs *flag.FlagSet, e env) {
	fs.StringVar(&m.url, "nats", natsURL(e), "NATS server URL (default $NATS_URL or nats://127.0.0.1:4222)")
	fs.StringVar(&m.version, "protocol", subjects.DefaultVersion, "UTP protocol version token of the mesh's subjects")
	fs.DurationVar(&m.timeout, "timeout", 10*time.Second, "how long one request to the mesh may take")
	fs.BoolVar(&m.json, "json", false, "print JSON instead of a table")
}

// connect dials NATS. The error says how to start a mesh when none answers.
func (m *meshFlags) connect(ctx context.Context, name string) (*nats.Conn, error) {
	if err := subjects.ValidateToken("version", m.version); err != nil {
		return nil, usagef("--protocol: %v", err)
	}
	if m.timeout <= 0 {
		return nil, usagef("--timeout must be positive, e.g. --timeout 10s")
	}
	nc, err := nats.Connect(m.url, nats.Name("utpmesh-"+name), nats.Timeout(m.timeout), nats.RetryOnFailedConnect(false))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w (is the mesh running? start it with 'utpmesh up', or pass --nats URL)", m.url, err)
	}
	return nc, nil
}

// writeJSON prints v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// isTerminal reports whether w is a terminal (progress output goes only
// there, so piped output stays clean).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
