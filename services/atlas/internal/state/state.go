// Package state is the contract of an ATLAS group's data: a keyed store with
// closure transactions, scoped by project and bucket, that the services of
// internal/kit run their tools in.
//
// Two implementations live in their own packages and pass one conformance
// suite (statetest):
//
//   - boltstate: the group's local bbolt file, atlas-<group>.db (the
//     default). One process may write it; the layout is the one the ATLAS
//     services have always used (a top-level bucket "p:<project>" holding
//     one nested bucket per name).
//   - kvstate: a JetStream KV bucket per group, atlas_<group>, R1 or R3,
//     that every worker of the group shares. A transaction is optimistic:
//     it reads a per-project version key first, buffers its writes, and
//     commits them as one atomic batch that also advances the version key
//     with compare-and-set; a conflicting commit re-runs the closure, up to
//     a bound (ErrConflict).
//
// Closures passed to Update may therefore run more than once: they must not
// have effects outside the transaction (the kit's Outcome.After runs after
// the commit). A transaction keeps the ctx of its View or Update for its
// reads, as database/sql's Tx does.
package state

import (
	"context"
	"errors"
)

// Errors of a Store.
var (
	// ErrConflict: an Update gave up after its commit conflicted with
	// other writers as many times as the store allows.
	ErrConflict = errors.New("atlas state: too many concurrent writers; try again")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("atlas state: closed")
	// ErrReadOnly: a write in a View transaction.
	ErrReadOnly = errors.New("atlas state: write in a read-only transaction")
	// ErrUnknownOutcome: an Update's commit failed in a way that does not
	// say whether it was stored (the replicated store's commit request
	// timed out, say). Read the state again before deciding anything.
	ErrUnknownOutcome = errors.New("atlas state: the commit may or may not have been stored")
	// ErrStop, returned by a Scan callback, ends the scan early; Scan then
	// returns nil.
	ErrStop = errors.New("atlas state: stop scan")
)

// Store is a group's data.
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
