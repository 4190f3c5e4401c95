// Package decodememo remembers what stored bytes decoded to, so that a
// record a bbolt file holds is not decoded again on every read of it.
//
// A Memo entry is the bytes of a value and what they decode to. Get
// answers only when the bytes it is given are exactly the remembered
// ones, so a Memo is never stale: a value rewritten by anyone (another
// transaction, a rolled-back write that was remembered but never
// committed, another file with the same keys) has other bytes and misses.
// It is correct to share one Memo between files and transactions as long
// as decoding is deterministic: the same bytes always decode to the same
// value.
//
// The inbox's entries and the CardStore's turn summaries are read and
// rewritten several times per call (an entry: stored, marked sent, read,
// acked), each read a full JSON decode inside the node file's one
// committer; a Memo filled by the writes turns the reads that follow
// into a map lookup and a byte comparison (docs/performance.md).
//
// A Memo holds at most its size of entries; when full, Put evicts an
// arbitrary one. Values are returned as stored: a T that holds pointers
// must be copied by the caller before it is changed.
package decodememo

import (
	"bytes"
	"fmt"
	"sync"
)

// Memo remembers decoded values by key and bytes. It is safe for
// concurrent use. Create it with New.
type Memo[T any] struct {
	mu   sync.Mutex
	max  int
	byID map[string]entry[T]
}

type entry[T any] struct {
	data []byte
	v    T
}

// New returns a Memo of at most size entries (at least 1).
func New[T any](size int) *Memo[T] {
	return &Memo[T]{max: max(size, 1), byID: make(map[string]entry[T])}
}

// Get returns the value remembered for key when data is exactly the bytes
// it was decoded from.
func (m *Memo[T]) Get(key, data []byte) (T, bool) {
	m.mu.Lock()
	e, ok := m.byID[string(key)]
	m.mu.Unlock()
	if !ok || !bytes.Equal(e.data, data) {
		var zero T
		return zero, false
	}
	return e.v, true
}

// Put remembers that data, stored under key, decodes to v. It copies key
// and data (bbolt's are valid only within their transaction).
func (m *Memo[T]) Put(key, data []byte, v T) {
	d := bytes.Clone(data)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byID[string(key)]; !ok && len(m.byID) >= m.max {
		for k := range m.byID {
			delete(m.byID, k)
			break
		}
	}
	m.byID[string(key)] = entry[T]{data: d, v: v}
}

// Agrees reports, for a consistency check, whether what m remembers for
// key and data, if anything, is what data decodes to (decoded): both
// encode alike with encode. It is nil when m remembers nothing for them.
func (m *Memo[T]) Agrees(key, data []byte, decoded T, encode func(T) ([]byte, error)) error {
	v, ok := m.Get(key, data)
	if !ok {
		return nil
	}
	got, err := encode(v)
	if err != nil {
		return fmt.Errorf("decodememo: encode the value remembered for %q: %w", key, err)
	}
	want, err := encode(decoded)
	if err != nil {
		return fmt.Errorf("decodememo: encode the value %q decodes to: %w", key, err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("decodememo: %q: the memo holds %s for bytes that decode to %s", key, got, want)
	}
	return nil
}

// Len is how many entries m holds.
func (m *Memo[T]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byID)
}
