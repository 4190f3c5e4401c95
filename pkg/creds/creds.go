// Package creds loads a mesh identity's NATS credentials: the nkey seed
// file `utpmesh up` writes for every identity under <data>/creds (or a
// NATS .creds file, for a server run with accounts), as a nats.Option.
//
// A mesh started with identities (the default of `utpmesh up`) admits one
// NATS user per role instance, each allowed exactly its part of the
// protocol (docs/security.md): core, admin, agent-<project> and
// worker-<service>. Name the file with SeedPath and the identity's name
// (AgentName, WorkerName, RoleAdmin), then pass Option's result to
// nats.Connect.
//
// The server half — minting the seeds and the permissions of each role —
// is internal to the mesh (internal/meshauth); this package imports no
// server code.
package creds

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
)

// Role names: the first part of an identity's name.
const (
	RoleCore   = "core"
	RoleAdmin  = "admin"
	RoleAgent  = "agent"
	RoleWorker = "worker"
)

// DefaultDir is where a local `utpmesh up` with its default --data writes
// the identities' seeds.
const DefaultDir = "./utpmesh-data/creds"

// ErrCreds matches (errors.Is) a credentials file that is missing,
// unreadable or not credentials.
var ErrCreds = errors.New("creds: credentials")

// AgentName is the name of the agent identity of a project:
// agent-<project>.
func AgentName(project string) string { return RoleAgent + "-" + project }

// WorkerName is the name of the worker identity of a tool service:
// worker-<service>, dots replaced by underscores.
func WorkerName(service string) string {
	return RoleWorker + "-" + strings.ReplaceAll(service, ".", "_")
}

// SeedPath is where the seed of the identity named name lives under dir:
// <dir>/<name>.nk.
func SeedPath(dir, name string) string { return filepath.Join(dir, name+".nk") }

// Option returns the nats.Option that authenticates with the credentials
// file path: an nkey seed file (what `utpmesh up` writes, *.nk) or a NATS
// .creds file (JWT and seed). The seed never leaves the process: the
// server checks a signature of its nonce.
func Option(path string) (nats.Option, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w (pass --creds FILE or set $NATS_CREDS; 'utpmesh up' writes them under DATA/creds)", ErrCreds, err)
	}
	if bytes.Contains(data, []byte("BEGIN NATS USER JWT")) {
		return nats.UserCredentials(path), nil
	}
	opt, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w (want an nkey seed file or a .creds file)", ErrCreds, path, err)
	}
	return opt, nil
}
