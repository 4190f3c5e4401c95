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
// Every identity has its own reply-inbox prefix, InboxPrefix of its public
// key: Option sets it (nats.CustomInboxPrefix), so request replies,
// JetStream deliveries to a pull consumer and key-value watches reach only
// the identity that asked, and the server lets each identity subscribe
// only to its own prefix (never _INBOX.>). A client that connects with the
// seed by other means must set the same prefix, e.g. the nats CLI's
// --inbox-prefix (docs/security.md).
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
	"github.com/nats-io/nkeys"
)

// Role names: the first part of an identity's name.
const (
	RoleCore   = "core"
	RoleAdmin  = "admin"
	RoleAgent  = "agent"
	RoleWorker = "worker"
	// RoleOperator is a human operator's identity (operator.nk): HEM
	// decisions, policy and identity changes, reads; not the admin key.
	RoleOperator = "operator"
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

// InboxPrefix is the reply-inbox prefix of the identity whose public
// nkey is pub: _INBOX.<pub>. The identity may subscribe to
// _INBOX.<pub>.> and to no other inbox.
func InboxPrefix(pub string) string { return "_INBOX." + pub }

// Option returns the nats.Option that authenticates with the credentials
// file path — an nkey seed file (what `utpmesh up` writes, *.nk) or a NATS
// .creds file (JWT and seed) — and sets the identity's reply-inbox prefix
// (InboxPrefix of its public key). The seed never leaves the process: the
// server checks a signature of its nonce.
func Option(path string) (nats.Option, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w (pass --creds FILE or set $NATS_CREDS; 'utpmesh up' writes them under DATA/creds)", ErrCreds, err)
	}
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w (want an nkey seed file or a .creds file)", ErrCreds, path, err)
	}
	pub, err := kp.PublicKey()
	kp.Wipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w (want an nkey seed file or a .creds file)", ErrCreds, path, err)
	}
	auth := nats.UserCredentials(path)
	if !bytes.Contains(data, []byte("BEGIN NATS USER JWT")) {
		if auth, err = nats.NkeyOptionFromSeed(path); err != nil {
			return nil, fmt.Errorf("%w: %s: %w (want an nkey seed file or a .creds file)", ErrCreds, path, err)
		}
	}
	inbox := nats.CustomInboxPrefix(InboxPrefix(pub))
	return func(o *nats.Options) error {
		if err := auth(o); err != nil {
			return err
		}
		return inbox(o)
	}, nil
}

// PublicKey returns the public nkey of the seed in the credentials file
// path (an nkey seed file or a .creds file).
func PublicKey(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrCreds, err)
	}
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w (want an nkey seed file or a .creds file)", ErrCreds, path, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrCreds, path, err)
	}
	return pub, nil
}
