package boltstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/boltfile"
)

// The claims of tool calls in the store's memory (see "Call claims" in
// the package documentation).
//
// Every claim decision on a call key (a key cardstore.ParseCallKey reads)
// runs under the key's lock (claimTable.lock), held from the read of the
// key's state to the record of the new one: for an in-memory claim until
// the claim is in the table, for a durable write (a tool.result that ends
// the claim, Release, a long lease) until its commit has ended. So the
// decisions on one key are serial, and a StartCall that finds no result
// under the lock cannot be overtaken by a result: every Put of a
// tool.result holds its call's key lock until its transaction has
// committed or failed.
//
// An entry stays in the table while somebody holds or waits for its lock,
// or while its record is dirty (newer than the stored one); a dirty
// record is written by a flush that rides along with the next commit
// (boltfile.Committer.Later). A loaded entry's record is the key's state
// (the bucket's when it is clean); an entry that is not loaded says
// nothing, and the bucket is the truth.

// claimTable is the store's memory of call claims. mu guards every field
// of the table and of its entries; it is never held across I/O or a wait,
// so the committer may take it inside a transaction.
type claimTable struct {
	mu       sync.Mutex
	entries  map[string]*claimEntry // by stored key (project 0x00 key; claimSlot says where it lives)
	dirty    map[*claimEntry]struct{}
	flushing bool // a flush is queued with the committer
	closed   bool // the store is closing: no new in-memory record
}

// claimEntry is one call key in the table.
type claimEntry struct {
	key    string        // project 0x00 claim key
	held   bool          // the key's lock is taken
	wake   chan struct{} // closed when the lock is given up; nil when nobody waits
	refs   int           // goroutines holding or waiting for the lock
	loaded bool          // rec is the key's state
	rec    *claimRecord  // nil: no record; never changed in place
	dirty  bool          // rec is not in the bucket yet
	ver    uint64        // counts changes of rec, so a flush knows what it wrote
}

func newClaimTable() *claimTable {
	return &claimTable{entries: make(map[string]*claimEntry), dirty: make(map[*claimEntry]struct{})}
}

// lock takes the lock of the claim's project 0x00 key, waiting for its holder
// (ctx bounds the wait), and returns the key's entry.
func (t *claimTable) lock(ctx context.Context, key string) (*claimEntry, error) {
	t.mu.Lock()
	e := t.entries[key]
	if e == nil {
		e = &claimEntry{key: key}
		t.entries[key] = e
	}
	e.refs++
	for e.held {
		if e.wake == nil {
			e.wake = make(chan struct{})
		}
		w := e.wake
		t.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			t.mu.Lock()
			e.refs--
			t.gcLocked(e)
			t.mu.Unlock()
			return nil, ctx.Err()
		}
		t.mu.Lock()
	}
	e.held = true
	t.mu.Unlock()
	return e, nil
}

// unlock gives the key's lock up. It reports whether a flush must be
// queued (the caller calls Store.flushClaims then, outside the lock).
func (t *claimTable) unlock(e *claimEntry) (flush bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e.held = false
	if e.wake != nil {
		close(e.wake)
		e.wake = nil
	}
	e.refs--
	t.gcLocked(e)
	return t.wantFlushLocked()
}

// gcLocked drops e from the table when nothing keeps it there.
func (t *claimTable) gcLocked(e *claimEntry) {
	if e.refs == 0 && !e.held && !e.dirty && t.entries[e.key] == e {
		delete(t.entries, e.key)
	}
}

// wantFlushLocked reports whether a flush must be queued: a dirty record
// whose key nobody holds and no flush queued. (A held key's record is
// flushed after its holder gives the lock up: it may be about to change,
// or be written by the holder's own transaction.)
func (t *claimTable) wantFlushLocked() bool {
	if t.flushing {
		return false
	}
	for e := range t.dirty {
		if !e.held {
			t.flushing = true
			return true
		}
	}
	return false
}

// state returns the record of the entry (which the caller holds) and
// whether it is loaded.
func (t *claimTable) state(e *claimEntry) (*claimRecord, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return e.rec, e.loaded
}

// load sets the record of a held entry read from the bucket, unless it is
// loaded already (then the table is newer than the bucket).
func (t *claimTable) load(e *claimEntry, rec *claimRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !e.loaded {
		e.rec, e.loaded = rec, true
	}
}

// record makes rec the state of the held entry e, in memory only: the
// next flush writes it. It fails with cardstore.ErrClosed once the store
// is closing.
func (t *claimTable) record(e *claimEntry, rec *claimRecord) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return cardstore.ErrClosed
	}
	e.rec, e.loaded = rec, true
	e.ver++
	if !e.dirty {
		e.dirty = true
		t.dirty[e] = struct{}{}
	}
	return nil
}

// durable makes rec the state of the held entry e after a transaction of
// its holder committed rec (nil: deleted) to the bucket.
func (t *claimTable) durable(e *claimEntry, rec *claimRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e.rec, e.loaded = rec, true
	e.ver++
	if e.dirty {
		e.dirty = false
		delete(t.dirty, e)
	}
}

// peek returns the record of key when the table knows it (a loaded
// entry), for reads.
func (t *claimTable) peek(key string) (*claimRecord, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.entries[key]; e != nil && e.loaded {
		return e.rec, true
	}
	return nil, false
}

// close refuses new in-memory records from now on.
func (t *claimTable) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
}

// dirtyCount returns how many records are not in the bucket yet.
func (t *claimTable) dirtyCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.dirty)
}

// flushed is one record a flush wrote.
type flushed struct {
	e   *claimEntry
	ver uint64
	rec *claimRecord
}

// flushClaims queues a write of every dirty record whose key nobody holds
// with the committer's next transaction (boltfile.Committer.Later: it
// rides along with the next write, or commits alone after the Later
// delay). The write takes each record as it is when the transaction runs,
// so it never puts back a state the table has moved past; once committed,
// the records it wrote are clean unless they changed meanwhile. A flush
// that fails leaves its records dirty and queues the next one: a claim
// stays in memory until it is written (or its key's next durable write
// supersedes it). The caller set t.flushing (wantFlushLocked).
func (s *Store) flushClaims() {
	t := s.mem
	var written []flushed
	s.commits.Later(256, func(tx *bolt.Tx) error {
		written = written[:0] // a transaction may run more than once
		t.mu.Lock()
		for e := range t.dirty {
			if !e.held {
				written = append(written, flushed{e: e, ver: e.ver, rec: e.rec})
			}
		}
		t.mu.Unlock()
		if len(written) == 0 {
			return nil
		}
		b := &buckets{claims: tx.Bucket(bucketClaims), recs: tx.Bucket(bucketTurnRecs)}
		if b.claims == nil || b.recs == nil {
			return errors.New("boltstore: the claims or turnrecs bucket is missing from the data file (was it modified through DB()?)")
		}
		for i, w := range written {
			var err error
			if w.rec == nil {
				err = b.deleteClaim([]byte(w.e.key))
			} else {
				var data []byte
				if data, err = json.Marshal(w.rec); err == nil {
					err = b.putClaim([]byte(w.e.key), data)
				}
			}
			if err != nil {
				err = fmt.Errorf("boltstore: write the claim on key %q: %w", w.e.key, err)
				if i > 0 {
					return dirty(err)
				}
				return err
			}
		}
		return nil
	}, func(err error) {
		t.mu.Lock()
		t.flushing = false
		if err == nil {
			for _, w := range written {
				if w.e.ver == w.ver && w.e.dirty {
					w.e.dirty = false
					delete(t.dirty, w.e)
					t.gcLocked(w.e)
				}
			}
		} else if !errors.Is(err, boltfile.ErrClosed) {
			s.cfg.logger.Error("boltstore: writing in-memory claims failed; they stay in memory and are written with the next commit",
				"path", s.path, "claims", len(written), "err", err)
		}
		again := !errors.Is(err, boltfile.ErrClosed) && t.wantFlushLocked()
		t.mu.Unlock()
		if again {
			s.flushClaims()
		}
	})
}

// unlockClaim gives up the lock of e and queues a flush if one is due.
func (s *Store) unlockClaim(e *claimEntry) {
	if s.mem.unlock(e) {
		s.flushClaims()
	}
}

// lockClaims takes the locks of the claim's project 0x00 keys in sorted order
// (so two requests that need several keys never wait for each other in a
// circle); on an error it holds none.
func (s *Store) lockClaims(ctx context.Context, keys []string) ([]*claimEntry, error) {
	out := make([]*claimEntry, 0, len(keys))
	for _, k := range keys {
		e, err := s.mem.lock(ctx, k)
		if err != nil {
			s.unlockClaims(out)
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// unlockClaims is unlockClaim for every entry of es.
func (s *Store) unlockClaims(es []*claimEntry) {
	flush := false
	for _, e := range es {
		flush = s.mem.unlock(e) || flush
	}
	if flush {
		s.flushClaims()
	}
}

// callTx is what one run of a write request's transaction knows of the
// table: Put's release of a call's claim and PutToolResult's fence read
// the claim from it (the table first, then the bucket), and the
// tombstones the run wrote are recorded for the request to apply to the
// table once the transaction has committed.
type callTx struct {
	mem   *claimTable
	epoch uint64
	ended []endedClaim // tombstones written by this run
}

// endedClaim is a tombstone a result's transaction wrote.
type endedClaim struct {
	key string // project 0x00 claim key
	rec *claimRecord
}

// currentClaim reads the claim under the claim's project 0x00 key k within a
// write transaction: the table's record when it is loaded, else the
// bucket's. The caller holds k's lock (every Put of a tool.result does).
func (b *buckets) currentClaim(k []byte, name string) (*claimRecord, error) {
	if rec, ok := b.tableClaim(k); ok {
		return rec, nil
	}
	return loadClaim(b, k, name)
}

// tableClaim is the claim table's record of k when the table has it
// loaded (within writeCalls).
func (b *buckets) tableClaim(k []byte) (*claimRecord, bool) {
	if b.calls == nil {
		return nil, false
	}
	return b.calls.mem.peek(string(k))
}

// inMemory reports whether a claim of lease on a call key is kept in
// memory (a lease up to the lock-delay) rather than written at once.
func (s *Store) inMemory(lease time.Duration) bool {
	return s.cfg.lockDelay > 0 && lease <= s.cfg.lockDelay
}
