// Package blob is the state engine's store of large values (package state
// keeps records; blob keeps what is too big for a record: CyNodeAI's
// artifact contents and skill bodies). A blob is named, written once and
// read whole; its name must say its content (carry its SHA-256, see
// SHA256Name), because a second Put of a name stores nothing.
//
// Two implementations live in their own packages and pass one
// conformance suite (blobtest), which runs against a local directory, a
// single-node JetStream and a three-node JetStream cluster:
//
//   - dirblob: one file per blob in a local directory (the state engine's
//     bolt mode: one process serves it).
//   - objblob: a JetStream object store (R1 on a single node, R3 on a
//     cluster) that every worker of the service shares, read and written
//     without consumers, so that a worker identity needs no consumer
//     permission (objblob.PublishSubjects).
package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// Errors of a Store.
var (
	// ErrNotFound: no blob of that name.
	ErrNotFound = errors.New("blob: not found")
	// ErrTooLarge: the content is over the store's size limit.
	ErrTooLarge = errors.New("blob: content over the size limit")
	// ErrInvalidName: the name is empty, too long, or has a character
	// other than letters, digits, '.', '_' and '-'.
	ErrInvalidName = errors.New("blob: invalid name")
	// ErrCorrupt: a stored blob does not read back as it was written (its
	// size or digest differs, or a part is missing).
	ErrCorrupt = errors.New("blob: stored content is damaged")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("blob: closed")
)

// MaxNameBytes bounds a blob name.
const MaxNameBytes = 200

// DefaultMaxBytes is a store's size limit when its configuration sets
// none.
const DefaultMaxBytes = 64 << 20

// Store keeps named, immutable blobs.
type Store interface {
	// Put stores content under name. A name is written once: when name
	// exists, Put stores nothing and returns nil, so that a retried or
	// concurrent Put of the same content is harmless. Content over the
	// store's limit is refused with ErrTooLarge.
	Put(ctx context.Context, name string, content []byte) error
	// Get returns the content stored under name, or ErrNotFound.
	Get(ctx context.Context, name string) ([]byte, error)
	// Delete removes name; a missing name is not an error.
	Delete(ctx context.Context, name string) error
	// Close releases the store; it is idempotent.
	Close() error
}

// SHA256Name is the name of content under prefix ("artifact", "skill"):
// prefix-<hex SHA-256 of content>.
func SHA256Name(prefix string, content []byte) string {
	sum := sha256.Sum256(content)
	return prefix + "-" + hex.EncodeToString(sum[:])
}

// CheckName refuses a name that is empty, longer than MaxNameBytes, starts
// with '.', or holds a character other than ASCII letters, digits, '.',
// '_' and '-' (so it is a file name and a subject token everywhere).
func CheckName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: %q %s; use letters, digits, '.', '_' and '-', such as \"artifact-<sha256>\"", ErrInvalidName, name, why)
	}
	switch {
	case name == "":
		return bad("is empty")
	case len(name) > MaxNameBytes:
		return bad(fmt.Sprintf("is longer than %d bytes", MaxNameBytes))
	case name[0] == '.':
		return bad("starts with '.'")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return bad(fmt.Sprintf("has the byte %q", c))
		}
	}
	return nil
}

// CheckSize refuses content of size bytes over max.
func CheckSize(name string, size int, max int64) error {
	if int64(size) > max {
		return fmt.Errorf("%w: %s is %d bytes, over the limit of %d", ErrTooLarge, name, size, max)
	}
	return nil
}
