package boltinbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/internal/decodememo"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// Errors of opening the file. They are internal/boltfile's values, shared
// by every bbolt file of the mesh.
var (
	// ErrLocked: the inbox file is held open by another process (bbolt
	// takes an exclusive file lock); Open gave up after its timeout.
	ErrLocked = boltfile.ErrLocked
	// ErrSchemaVersion: the inbox file has a layout this build cannot read.
	ErrSchemaVersion = boltfile.ErrSchemaVersion
)

// The file layout (schema version 1). Every key starts with the project, so
// nothing one project does can reach another's data. A key component is
// written as uvarint(length) + bytes, which keeps composite keys
// unambiguous whatever bytes the ids hold and makes "all keys of this
// (project, agent)" a plain prefix.
//
//	meta     "schema_version"                 → "1"
//	entries  project·inbox_id                 → record JSON (Entry + seq)
//	calls    project·agent_turn_id·tool_call_id → inbox_id   (dedupe; turn scan)
//	agents   project·agent_id·seq(8 bytes BE) → inbox_id    (every entry, creation order)
//	pending  project·agent_id·seq(8 bytes BE) → inbox_id    (pending entries only)
//	epochs   project·agent_turn_id            → highest turn_epoch (8 bytes BE)
//
// seq is the entries bucket's sequence, taken in the inserting transaction:
// it orders an agent's entries by creation.
var (
	bucketMeta    = []byte("meta")
	bucketEntries = []byte("entries")
	bucketCalls   = []byte("calls")
	bucketAgents  = []byte("agents")
	bucketPending = []byte("pending")
	bucketEpochs  = []byte("epochs")
	allBuckets    = [][]byte{bucketMeta, bucketEntries, bucketCalls, bucketAgents, bucketPending, bucketEpochs}
)

const schemaVersion = "1"

// record is what the entries bucket holds: the entry and its sequence.
type record struct {
	inbox.Entry
	Seq uint64 `json:"seq"`
}

// DB is the inbox's bbolt file, an inbox.Backend. Writes go through a
// group committer (internal/boltfile): concurrent reports, acks and epoch
// changes share one fsync'd transaction, and the wakeup-sent mark and lazy
// acks ride along with the next one. Create it with Open.
type DB struct {
	bolt    *bolt.DB
	commits *boltfile.Committer
	path    string
	// shared: bolt and commits belong to the caller (OpenShared).
	shared bool
	// mu guards closed for the read path: every read transaction holds it
	// for reading, Close for writing, so no read starts on a closed file.
	mu     sync.RWMutex
	closed bool

	// lazy holds the lazy acks queued but not committed yet, by
	// string(key(project, inbox_id)), so that reads see an entry acked
	// from the moment its ack was answered.
	lazyMu sync.Mutex
	lazy   map[string]time.Time
}

// overlay shows a queued lazy ack on e.
func (d *DB) overlay(project string, e *inbox.Entry) {
	if e.State != inbox.StatePending {
		return
	}
	d.lazyMu.Lock()
	t, ok := d.lazy[string(key(project, e.InboxID))]
	d.lazyMu.Unlock()
	if ok {
		e.State, e.AckedAt = inbox.StateAcked, &t
	}
}

var _ inbox.Backend = (*DB)(nil)

// DefaultOpenTimeout is the lock wait a mesh gives Open: how long a second
// process waits for the inbox file before failing with ErrLocked.
const DefaultOpenTimeout = 5 * time.Second

// Open opens (creating it, mode 0600, if missing) the inbox file at path,
// waiting up to timeout for another process's lock (then ErrLocked); 0
// waits forever. The caller closes it (after the inbox service using it
// has stopped).
func Open(path string, timeout time.Duration) (*DB, error) {
	b, err := boltfile.Open(path, boltfile.Options{Timeout: timeout, Schema: &boltfile.Schema{
		Kind: "inbox", Version: schemaVersion, Buckets: allBuckets,
	}})
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	return &DB{bolt: b, path: path, commits: boltfile.NewCommitter(b, boltfile.CommitConfig{Name: path}), lazy: map[string]time.Time{}}, nil
}

// Close commits every write accepted before it (wakeup-sent marks and lazy
// acks included), then closes the file. Later calls fail with
// inbox.ErrClosed; Close again does nothing. An inbox in a shared file
// (OpenShared) leaves the committer and the file to their owner, whose
// committer's Close commits what is queued.
func (d *DB) Close() error {
	if !d.shared {
		d.commits.Close()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	if d.shared {
		return nil // the caller closes the committer, then the file
	}
	if err := d.bolt.Close(); err != nil {
		return fmt.Errorf("inbox: close %s: %w", d.path, err)
	}
	return nil
}

// update runs fn as one durable write, in a transaction it may share with
// other writes. Every error of fn is treated as a failure after writing
// (boltfile.Dirty): the shared transaction is rolled back and the others
// run again without fn, so fn may write before it checks. fn may run more
// than once and must set its outputs anew on every run.
func (d *DB) update(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if d.shared && d.isClosed() {
		return inbox.ErrClosed // the shared committer outlives the inbox
	}
	return d.mapClosed(d.commits.Write(ctx, 0, dirtyOnError(fn)))
}

// Flush commits every write queued so far (wakeup-sent marks and lazy acks
// waiting for the next transaction) and returns once they are on disk and
// their callbacks have run.
func (d *DB) Flush(ctx context.Context) error {
	return d.update(ctx, func(*bolt.Tx) error { return nil })
}

// Bolt returns the bbolt database for read-only inspection (tx.Check,
// tx.WriteTo backups). Writing to it bypasses every rule of the inbox;
// don't.
func (d *DB) Bolt() *bolt.DB { return d.bolt }

// later runs fn in the next transaction (see boltfile.Committer.Later) and
// calls done with the outcome once it is committed.
func (d *DB) later(fn func(tx *bolt.Tx) error, done func(err error)) {
	if d.shared && d.isClosed() {
		done(inbox.ErrClosed)
		return
	}
	d.commits.Later(0, dirtyOnError(fn), func(err error) { done(d.mapClosed(err)) })
}

func dirtyOnError(fn func(tx *bolt.Tx) error) boltfile.ApplyFunc {
	return func(tx *bolt.Tx) error {
		if err := fn(tx); err != nil {
			return boltfile.Dirty(err)
		}
		return nil
	}
}

func (d *DB) mapClosed(err error) error {
	if errors.Is(err, boltfile.ErrClosed) {
		return fmt.Errorf("%w: %w", inbox.ErrClosed, err)
	}
	return err
}

// Pending returns how many entries are pending, across every project.
func (d *DB) Pending(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n := 0
	err := d.view(ctx, func(tx *bolt.Tx) error {
		n = tx.Bucket(bucketPending).Stats().KeyN
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("inbox: count pending entries: %w", err)
	}
	return n, nil
}

func (d *DB) view(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return inbox.ErrClosed
	}
	return d.bolt.View(fn)
}

// key joins length-prefixed components.
func key(parts ...string) []byte {
	n := 0
	for _, p := range parts {
		n += binary.MaxVarintLen64 + len(p)
	}
	k := make([]byte, 0, n+8)
	for _, p := range parts {
		k = binary.AppendUvarint(k, uint64(len(p)))
		k = append(k, p...)
	}
	return k
}

func seqKey(prefix []byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), seq)
}

// records remembers the entries written last as decoded (decodememo): an
// entry is stored, marked sent, read and acked within moments, and each
// of those read it back; a read of the bytes a write left is a lookup.
var records = decodememo.New[record](4096)

func getRecord(tx *bolt.Tx, project, id string) (*record, error) {
	k := key(project, id)
	v := tx.Bucket(bucketEntries).Get(k)
	if v == nil {
		return nil, nil
	}
	if r, ok := records.Get(k, v); ok {
		r = r.detached()
		return &r, nil
	}
	var r record
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("inbox: entry %s of project %s is corrupt: %w", id, project, err)
	}
	return &r, nil
}

// callRecord returns the entry of a call, found by its dedupe key, or nil.
func callRecord(tx *bolt.Tx, project, turn, call string) (*record, error) {
	id := tx.Bucket(bucketCalls).Get(key(project, turn, call))
	if id == nil {
		return nil, nil
	}
	r, err := getRecord(tx, project, string(id))
	if err == nil && r == nil {
		err = fmt.Errorf("inbox: dedupe index names entry %s of project %s, which does not exist", id, project)
	}
	return r, err
}

func putRecord(tx *bolt.Tx, r *record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("inbox: encode entry %s: %w", r.InboxID, err)
	}
	k := key(r.ProjectID, r.InboxID)
	if err := tx.Bucket(bucketEntries).Put(k, v); err != nil {
		return err
	}
	records.Put(k, v, r.detached())
	return nil
}

// detached is a copy of r that shares no memory with it: the memo's
// records and the callers' are changed independently.
func (r record) detached() record {
	if r.AckedAt != nil {
		t := *r.AckedAt
		r.AckedAt = &t
	}
	if r.WakeupSentAt != nil {
		t := *r.WakeupSentAt
		r.WakeupSentAt = &t
	}
	return r
}

// Insert stores the entry of an accepted report, or finds the existing one,
// in one transaction: the dedupe check, the epoch check and every index
// write commit together or not at all.
//
// created_at is read inside the transaction, so creation order (seq) and
// created_at agree. A read transaction looks for the call's entry first:
// a report of a call that has one (a duplicate, or the worker's report
// of an entry its result's transaction stored, ResultHook) costs no
// commit.
func (d *DB) Insert(ctx context.Context, project, channel string, rep *utp.Report, traceparent string) (*inbox.Entry, bool, error) {
	var (
		created bool
		res     *inbox.Entry
	)
	err := d.view(ctx, func(tx *bolt.Tx) error {
		r, err := callRecord(tx, project, rep.AgentTurnID, rep.ToolCallID)
		if err != nil || r == nil {
			return err
		}
		res = &r.Entry
		return nil
	})
	if err != nil || res != nil {
		return res, false, err
	}
	err = d.update(ctx, func(tx *bolt.Tx) error {
		var err error
		res, created, err = insertTx(tx, project, channel, rep, traceparent)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return res, created, nil
}

// insertTx is Insert's transaction: the dedupe check, the epoch check and
// every index write.
func insertTx(tx *bolt.Tx, project, channel string, rep *utp.Report, traceparent string) (*inbox.Entry, bool, error) {
	calls := tx.Bucket(bucketCalls)
	callKey := key(project, rep.AgentTurnID, rep.ToolCallID)
	if id := calls.Get(callKey); id != nil {
		r, err := getRecord(tx, project, string(id))
		if err != nil {
			return nil, false, err
		}
		if r == nil {
			return nil, false, fmt.Errorf("inbox: dedupe index names entry %s of project %s, which does not exist", id, project)
		}
		return &r.Entry, false, nil
	}
	// Only set_epoch (the agent's runtime) raises a turn's epoch: a
	// report is judged against it and never moves it, or any worker
	// could silence a turn with one report of a huge epoch.
	state := inbox.StatePending
	if highest, seen := readEpoch(tx.Bucket(bucketEpochs), key(project, rep.AgentTurnID)); seen && rep.TurnEpoch < highest {
		state = inbox.StateStale
	}
	entries := tx.Bucket(bucketEntries)
	seq, err := entries.NextSequence()
	if err != nil {
		return nil, false, err
	}
	r := &record{Seq: seq, Entry: inbox.Entry{
		InboxID: card.NewID(), ProjectID: project, ChannelID: channel,
		AgentID: rep.AgentID, AgentTurnID: rep.AgentTurnID, TurnEpoch: rep.TurnEpoch,
		ToolCallID: rep.ToolCallID, ToolResultCardID: rep.ToolResultCardID,
		Status: rep.Status, AfterExecution: rep.AfterExecution,
		StepID: rep.StepID, ToolName: rep.ToolName,
		State: state, CreatedAt: time.Now().UTC(), Traceparent: traceparent,
	}}
	if err := putRecord(tx, r); err != nil {
		return nil, false, err
	}
	id := []byte(r.InboxID)
	if err := calls.Put(callKey, id); err != nil {
		return nil, false, err
	}
	agentKey := seqKey(key(project, rep.AgentID), seq)
	if err := tx.Bucket(bucketAgents).Put(agentKey, id); err != nil {
		return nil, false, err
	}
	if state == inbox.StatePending {
		if err := tx.Bucket(bucketPending).Put(agentKey, id); err != nil {
			return nil, false, err
		}
	}
	return &r.Entry, true, nil
}

func readEpoch(b *bolt.Bucket, k []byte) (int64, bool) {
	v := b.Get(k)
	if len(v) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

// markSent records that the entry's wakeup was published (first time
// wins) and returns once that is on disk.
func (d *DB) markSent(ctx context.Context, project, id string, at time.Time) (first bool, err error) {
	err = d.update(ctx, func(tx *bolt.Tx) error {
		var err error
		first, err = applyMarkSent(tx, project, id, at)
		return err
	})
	return first, err
}

// MarkSentLater records the mark in the next transaction instead of a
// commit of its own, and calls done once it is committed; first is true
// for exactly one of the marks of an entry. Nobody waits for the mark's
// durability: a crash before the commit leaves the entry pending without
// it, and a redelivered report publishes the wakeup again under the same
// Nats-Msg-Id, which JetStream drops.
func (d *DB) MarkSentLater(project, id string, at time.Time, done func(first bool, err error)) {
	var first bool
	d.later(func(tx *bolt.Tx) error {
		var err error
		first, err = applyMarkSent(tx, project, id, at)
		return err
	}, func(err error) { done(first && err == nil, err) })
}

// applyMarkSent sets the entry's wakeup_sent_at unless it is set.
func applyMarkSent(tx *bolt.Tx, project, id string, at time.Time) (bool, error) {
	r, err := getRecord(tx, project, id)
	if err != nil {
		return false, err
	}
	if r == nil {
		return false, fmt.Errorf("%w: inbox entry %s in project %s", inbox.ErrNotFound, id, project)
	}
	if r.WakeupSentAt != nil {
		return false, nil
	}
	t := at.UTC()
	r.WakeupSentAt = &t
	return true, putRecord(tx, r)
}

// Get returns the entry, or an error matching inbox.ErrNotFound.
func (d *DB) Get(ctx context.Context, project, id string) (*inbox.Entry, error) {
	var e *inbox.Entry
	err := d.view(ctx, func(tx *bolt.Tx) error {
		r, err := getRecord(tx, project, id)
		if err != nil {
			return err
		}
		if r == nil {
			return fmt.Errorf("%w: inbox entry %s in project %s", inbox.ErrNotFound, id, project)
		}
		e = &r.Entry
		d.overlay(project, e)
		return nil
	})
	return e, err
}

// List reads one index in creation order: for a turn, the turn's
// entries (the calls index, whose keys of a turn share the prefix
// project·agent_turn_id: a turn has few entries); otherwise the agent's
// pending index for pending entries and its full index for the others.
// A listing never reads more of the agent's history than its filters
// need.
func (d *DB) List(ctx context.Context, project string, q inbox.ListQuery) ([]inbox.Entry, error) {
	out := []inbox.Entry{}
	err := d.view(ctx, func(tx *bolt.Tx) error {
		var afterSeq uint64
		if q.After != "" {
			r, err := getRecord(tx, project, q.After)
			if err != nil {
				return err
			}
			if r == nil || r.AgentID != q.AgentID {
				return fmt.Errorf("%w: after: inbox entry %s of agent %s in project %s", inbox.ErrNotFound, q.After, q.AgentID, project)
			}
			afterSeq = r.Seq + 1
		}
		keep := func(r *record) bool {
			d.overlay(project, &r.Entry)
			return q.State == inbox.StateAll || r.State == q.State
		}
		if q.ToolCallID != "" {
			r, err := callRecord(tx, project, q.AgentTurnID, q.ToolCallID)
			if err != nil || r == nil {
				return err
			}
			if r.AgentID == q.AgentID && r.Seq >= afterSeq && q.Limit > 0 && keep(r) {
				out = append(out, r.Entry)
			}
			return nil
		}
		if q.AgentTurnID != "" {
			var recs []*record
			prefix := key(project, q.AgentTurnID)
			c := tx.Bucket(bucketCalls).Cursor()
			for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
				r, err := getRecord(tx, project, string(v))
				if err != nil {
					return err
				}
				if r == nil {
					return fmt.Errorf("inbox: dedupe index names entry %s of project %s, which does not exist", v, project)
				}
				if r.AgentID == q.AgentID && r.Seq >= afterSeq && keep(r) {
					recs = append(recs, r)
				}
			}
			sort.Slice(recs, func(i, j int) bool { return recs[i].Seq < recs[j].Seq })
			for _, r := range recs[:min(len(recs), q.Limit)] {
				out = append(out, r.Entry)
			}
			return nil
		}
		idx := tx.Bucket(bucketAgents)
		if q.State == inbox.StatePending {
			idx = tx.Bucket(bucketPending)
		}
		prefix := key(project, q.AgentID)
		start := prefix
		if q.After != "" {
			start = seqKey(prefix, afterSeq)
		}
		c := idx.Cursor()
		for k, v := c.Seek(start); k != nil && bytes.HasPrefix(k, prefix) && len(out) < q.Limit; k, v = c.Next() {
			r, err := getRecord(tx, project, string(v))
			if err != nil {
				return err
			}
			if r == nil {
				return fmt.Errorf("inbox: agent index names entry %s of project %s, which does not exist", v, project)
			}
			if keep(r) {
				out = append(out, r.Entry)
			}
		}
		return nil
	})
	return out, err
}

// Ack marks the pending entries among ids acked, all or none: an unknown id
// fails the whole call.
func (d *DB) Ack(ctx context.Context, project string, ids []string, now time.Time) (int, error) {
	n := 0
	err := d.update(ctx, func(tx *bolt.Tx) error {
		var err error
		n, err = applyAck(tx, project, ids, now)
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// AckLater checks that every id has an entry in the project and counts
// the pending ones in a read transaction, then queues the ack itself as a
// Later write: it rides along with the next inbox transaction (a report's
// entry, another ack) instead of paying a commit of its own. done, when not
// nil, is called once the ack is committed (or failed).
func (d *DB) AckLater(ctx context.Context, project string, ids []string, now time.Time, done func(error)) (int, error) {
	n := 0
	err := d.view(ctx, func(tx *bolt.Tx) error {
		var missing []string
		for _, id := range ids {
			r, err := getRecord(tx, project, id)
			if err != nil {
				return err
			}
			if r == nil {
				missing = append(missing, id)
				continue
			}
			// An entry acked lazily a moment ago is acked already: a
			// second ack of it changes nothing and does not count.
			d.overlay(project, &r.Entry)
			if r.State == inbox.StatePending {
				n++
			}
		}
		if len(missing) > 0 {
			return inbox.NotFound(project, missing)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	t := now.UTC()
	d.lazyMu.Lock()
	for _, id := range ids {
		d.lazy[string(key(project, id))] = t
	}
	d.lazyMu.Unlock()
	d.later(func(tx *bolt.Tx) error {
		_, err := applyAck(tx, project, ids, now)
		return err
	}, func(err error) {
		// Committed (reads see it in the file now) or failed (the entries
		// are pending again, which is the truth).
		d.lazyMu.Lock()
		for _, id := range ids {
			if d.lazy[string(key(project, id))] == t {
				delete(d.lazy, string(key(project, id)))
			}
		}
		d.lazyMu.Unlock()
		if done != nil {
			done(err)
		}
	})
	return n, nil
}

// applyAck marks the pending entries among ids acked and returns how many
// were pending; an id with no entry in the project fails with ErrNotFound.
func applyAck(tx *bolt.Tx, project string, ids []string, now time.Time) (int, error) {
	n := 0
	recs := make([]*record, 0, len(ids))
	var missing []string
	for _, id := range ids {
		r, err := getRecord(tx, project, id)
		if err != nil {
			return 0, err
		}
		if r == nil {
			missing = append(missing, id)
			continue
		}
		recs = append(recs, r)
	}
	if len(missing) > 0 {
		return 0, inbox.NotFound(project, missing)
	}
	t := now.UTC()
	for _, r := range recs {
		if r.State != inbox.StatePending {
			continue // re-ack, or a stale entry: nothing to do
		}
		r.State, r.AckedAt = inbox.StateAcked, &t
		if err := putRecord(tx, r); err != nil {
			return 0, err
		}
		if err := tx.Bucket(bucketPending).Delete(seqKey(key(project, r.AgentID), r.Seq)); err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
}

// SetEpoch raises the turn's highest epoch and turns the turn's pending
// entries of older epochs stale, so that after it no pending entry of the
// turn is older than epoch. It returns the highest epoch and the entries it
// made stale.
func (d *DB) SetEpoch(ctx context.Context, project, turn string, epoch int64) (int64, []inbox.Entry, error) {
	var (
		highest int64
		staled  []inbox.Entry
	)
	err := d.update(ctx, func(tx *bolt.Tx) error {
		highest, staled = 0, nil
		epochs := tx.Bucket(bucketEpochs)
		turnKey := key(project, turn)
		cur, seen := readEpoch(epochs, turnKey)
		if seen && cur >= epoch {
			highest = cur
			return nil
		}
		highest = epoch
		if err := epochs.Put(turnKey, binary.BigEndian.AppendUint64(nil, uint64(epoch))); err != nil {
			return err
		}
		// calls keys are turnKey·tool_call_id: the prefix scan is the turn.
		c := tx.Bucket(bucketCalls).Cursor()
		var toStale []*record
		for k, v := c.Seek(turnKey); k != nil && bytes.HasPrefix(k, turnKey); k, v = c.Next() {
			r, err := getRecord(tx, project, string(v))
			if err != nil {
				return err
			}
			if r != nil && r.State == inbox.StatePending && r.TurnEpoch < epoch {
				toStale = append(toStale, r)
			}
		}
		for _, r := range toStale {
			r.State = inbox.StateStale
			if err := putRecord(tx, r); err != nil {
				return err
			}
			if err := tx.Bucket(bucketPending).Delete(seqKey(key(project, r.AgentID), r.Seq)); err != nil {
				return err
			}
			staled = append(staled, r.Entry)
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	return highest, staled, nil
}
