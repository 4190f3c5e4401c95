// Package state is the state engine of the tool services: a keyed store
// with closure transactions, scoped by project and bucket, that every
// catalogue keeps its records in (the ATLAS groups through their kit, ATP's
// bookings, HEM tasks, notifications and activities).
//
// Two implementations live in their own packages and pass one conformance
// suite (statetest), which runs against bbolt, a single-node JetStream and
// a three-node JetStream cluster:
//
//   - boltstate: a local bbolt file (atlas-<group>.db, atp.db). One process
//     may write it; a second one is refused by the file's lock (and the
//     data directory's). The layout is a top-level bucket "p:<project>"
//     holding one nested bucket per name.
//   - kvstate: a JetStream KV bucket (atlas_<group>, atp_state), R1 on a
//     single node or R3 on a cluster, that every worker of the service
//     shares. A transaction is optimistic: it reads a per-project version
//     key first, buffers its writes, and commits them as one atomic batch
//     that also advances the version key with compare-and-set; a
//     conflicting commit re-runs the closure, up to a bound (ErrConflict).
//
// A service's workers must all use the same backend: the bucket of the
// replicated state records its mode (kvstate.ModeKey), which a worker of
// the local mode checks before it starts, and a worker of the replicated
// mode checks that no local-mode worker holds the service (ErrModeMismatch).
//
// Closures passed to Update may therefore run more than once: they must not
// have effects outside the transaction. A transaction keeps the ctx of its
// View or Update for its reads, as database/sql's Tx does.
package state

import (
	"context"
	"errors"
)

// Errors of a Store.
var (
	// ErrConflict: an Update gave up after its commit conflicted with
	// other writers as many times as the store allows.
	ErrConflict = errors.New("state: too many concurrent writers; try again")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("state: closed")
	// ErrReadOnly: a write in a View transaction.
	ErrReadOnly = errors.New("state: write in a read-only transaction")
	// ErrUnknownOutcome: an Update's commit failed in a way that does not
	// say whether it was stored (the replicated store's commit request
	// timed out, say). Read the state again before deciding anything.
	ErrUnknownOutcome = errors.New("state: the commit may or may not have been stored")
	// ErrStop, returned by a Scan callback, ends the scan early; Scan then
	// returns nil.
	ErrStop = errors.New("state: stop scan")
)

// Store is a service's data.
type Store interface {
	// View runs fn in a read-only transaction: fn sees one consistent
	// state of every project it reads.
	View(ctx context.Context, fn func(Tx) error) error
	// Update runs fn in a read-write transaction and commits its writes
	// atomically when fn returns nil; an error from fn writes nothing and
	// is returned as it is. fn may run more than once (see the package
	// doc).
	Update(ctx context.Context, fn func(Tx) error) error
	// Close releases the store. It is idempotent.
	Close() error
}

// Tx is one transaction.
type Tx interface {
	// Bucket returns the named bucket of a project. It is never nil: a
	// bucket that does not exist reads as empty and is created by its
	// first write.
	Bucket(project, name string) Bucket
	// Projects lists the projects that have data, in ascending order.
	Projects() ([]string, error)
	// Writable reports whether this is an Update transaction.
	Writable() bool
}

// Bucket is a set of keys and values of one project. Keys are non-empty
// strings of any bytes; values may be empty. Slices passed in or returned
// must not be changed by the caller, and returned ones are valid only
// during the transaction.
type Bucket interface {
	// Get returns the value under key; found is false when it is absent.
	Get(key string) (value []byte, found bool, err error)
	// Put stores value under key.
	Put(key string, value []byte) error
	// Delete removes key; deleting an absent key is not an error.
	Delete(key string) error
	// Scan calls fn for every key that starts with prefix ("" for all),
	// in ascending byte order, or descending when reverse is set, and
	// sees the transaction's own writes. fn returning ErrStop ends the
	// scan with a nil error; any other error ends it with that error.
	Scan(prefix string, reverse bool, fn func(key string, value []byte) error) error
}

// Modes of a service's state: where every worker of it keeps its data.
const (
	// ModeBolt is a local bbolt file (boltstate): one process serves it.
	ModeBolt = "bolt"
	// ModeJetStream is a JetStream KV bucket (kvstate) every worker
	// shares.
	ModeJetStream = "jetstream"
)

// ErrModeMismatch: a worker's state mode differs from the one its
// service's other workers use; its message names both and what to do.
var ErrModeMismatch = errors.New("state: this worker's state mode differs from its service's")
