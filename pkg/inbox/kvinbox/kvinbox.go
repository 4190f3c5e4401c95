package kvinbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/utpmesh/utpmesh/internal/parallel"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/pkg/inbox"
)

var _ inbox.Backend = (*KV)(nil)

// DefaultBucket is the name of the inbox's key-value bucket in cluster mode.
const DefaultBucket = "utpmesh_inbox"

// OpenBucket creates (or opens) the inbox's key-value bucket with the given
// number of replicas (3 in a 3-node cluster, 1 on one server), for New,
// with atomic batches on (nats-server 2.12 and later; an older server
// keeps inserting key by key). An empty name is DefaultBucket.
func OpenBucket(ctx context.Context, js jetstream.JetStream, name string, replicas int) (*jskv.Bucket, error) {
	if name == "" {
		name = DefaultBucket
	}
	bk, err := jskv.Open(ctx, js, jskv.Config{Bucket: name, Replicas: replicas, History: 1, Description: "utpmesh inbox entries", Atomic: true})
	if err != nil {
		return nil, fmt.Errorf("kvinbox: %w", err)
	}
	return bk, nil
}

// The bucket's keys. Every key starts with the kind and the project;
// free-form ids (turns, calls) are hashed into subject-safe tokens, agent
// ids and inbox ids are tokens already.
//
//	c.<project>.<h(turn, call)>          → inbox_id        (dedupe: created once)
//	e.<project>.<inbox_id>               → record JSON
//	a.<project>.<agent>.<inbox_id>       → ""              (every entry of the agent)
//	p.<project>.<agent>.<inbox_id>       → ""              (pending entries of the agent)
//	u.<project>.<h(turn)>.<inbox_id>     → ""              (entries of the turn, for set_epoch)
//	t.<project>.<h(turn)>                → highest epoch (decimal)
//
// An insert creates c (the linearization point: the first report of a
// call wins), e and the indexes in one atomic batch, every key expected
// absent, so that no reader, and no crash, ever finds c without its entry
// (insert.go). When the batch is refused (c exists, the stream takes no
// batches) or its outcome is unknown, and on a bucket without batches, it
// creates c, then writes e and the indexes. A crash in between leaves c
// naming an entry that may be missing or unindexed; the report is then not
// acknowledged, and its redelivery finds c, rebuilds what is missing from
// the report and returns the same inbox_id. Entry changes (ack, stale,
// wakeup mark) are compare-and-set updates of e, retried on conflict, so
// any number of inbox processes may share the bucket.
//
// Every read that decides something goes to the stream leader
// (jskv.Bucket.Latest, Scan): a replica may lag.

// record is what an e. key holds: the entry (and a seq, always 0 here,
// kept so that the bucket's JSON matches the bbolt file's).
type record struct {
	inbox.Entry
	Seq uint64 `json:"seq"`
}

// KV keeps the inbox's entries in a JetStream key-value bucket: an
// inbox.Backend that any number of inbox processes may share. Create it
// with New.
type KV struct {
	bk      *jskv.Bucket
	kv      jetstream.KeyValue
	timeout time.Duration
	wg      sync.WaitGroup // background wakeup marks

	// floors holds, per "<project>.<agent>", a stream sequence below
	// which the agent has no agent key (the first one a listing found),
	// where the next listing's walk starts (list.go).
	floorMu sync.Mutex
	floors  map[string]uint64

	// markersGone: Pending has dropped the delete markers an older
	// version left on pending keys.
	markersGone atomic.Bool

	// fresh holds the entries inserted here until their wakeup marks.
	fresh freshEntries
}

// New returns the backend over bucket bk (see OpenBucket). Every
// operation is bounded by 10 s on top of its context.
func New(bk *jskv.Bucket) *KV {
	return &KV{bk: bk, kv: bk.KV, timeout: 10 * time.Second, floors: map[string]uint64{}}
}

// latest reads key from the leader; nil when it does not exist.
func (b *KV) latest(ctx context.Context, key string) (*jskv.Entry, error) {
	e, err := b.bk.Latest(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("kvinbox: read %s: %w", key, err)
	}
	if !e.Exists {
		return nil, nil
	}
	return &e, nil
}

// settled reads a key a failed Create says exists. In a cluster the
// leader refuses a Create on a key whose first write is still being
// replicated, before that write is readable: wait for it (briefly).
func (b *KV) settled(ctx context.Context, key string) (*jskv.Entry, error) {
	wait := time.Millisecond
	for range 40 {
		v, err := b.latest(ctx, key)
		if err != nil {
			return nil, err
		}
		if v != nil {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
	return nil, fmt.Errorf("kvinbox: %s exists (a Create failed) but is not readable from the stream leader", key)
}

// keys lists, sorted and without the prefix, the keys matching
// prefix+"*": one stream info request to the leader (jskv.Bucket.Keys),
// whose cost follows the number of matching keys, not the bucket's size.
// The index keys it is used on (u., p.) are dropped, never deleted, so
// every key it returns has a value, except the delete markers an older
// version left on p. keys (List drops them as it meets them).
func (b *KV) keys(ctx context.Context, prefix string) ([]string, error) {
	ks, err := b.bk.Keys(ctx, prefix+"*")
	if err != nil {
		return nil, fmt.Errorf("kvinbox: list %s*: %w", prefix, err)
	}
	for i, k := range ks {
		ks[i] = strings.TrimPrefix(k, prefix)
	}
	return ks, nil
}

func hashToken(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(strconv.Itoa(len(p))))
		h.Write([]byte{':'})
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func (b *KV) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.timeout)
}

func entryKey(project, id string) string { return "e." + project + "." + id }

func (b *KV) getRecord(ctx context.Context, project, id string) (*record, uint64, error) {
	e, err := b.latest(ctx, entryKey(project, id))
	if err != nil || e == nil {
		return nil, 0, err
	}
	var r record
	if err := json.Unmarshal(e.Value, &r); err != nil {
		return nil, 0, fmt.Errorf("kvinbox: entry %s of project %s is corrupt: %w", id, project, err)
	}
	return &r, e.Revision, nil
}

// update applies change to the entry with compare-and-set, re-reading on
// conflict. change returns false to leave the entry as it is.
func (b *KV) update(ctx context.Context, project, id string, change func(*record) bool) (*record, bool, error) {
	var (
		out     *record
		changed bool
	)
	err := jskv.CAS(ctx, "inbox entry "+id, func() error {
		out, changed = nil, false
		r, rev, err := b.getRecord(ctx, project, id)
		if err != nil {
			return err
		}
		if r == nil {
			return fmt.Errorf("%w: inbox entry %s in project %s", inbox.ErrNotFound, id, project)
		}
		out = r
		if !change(r) {
			return nil
		}
		v, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("kvinbox: encode entry %s: %w", id, err)
		}
		if _, err := b.kv.Update(ctx, entryKey(project, id), v, rev); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return out, changed, nil
}

func isConflict(err error) bool { return jskv.Conflict(err) }

func (b *KV) readEpoch(ctx context.Context, project, turnTok string) (int64, bool, error) {
	v, err := b.latest(ctx, "t."+project+"."+turnTok)
	if err != nil || v == nil {
		return 0, false, err
	}
	n, err := strconv.ParseInt(string(v.Value), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("kvinbox: epoch of turn key %s is corrupt: %w", turnTok, err)
	}
	return n, true, nil
}

// raiseEpoch sets the turn's highest epoch to epoch when that is higher and
// returns the highest epoch before the call and whether there was one.
func (b *KV) raiseEpoch(ctx context.Context, project, turnTok string, epoch int64) (int64, bool, error) {
	k := "t." + project + "." + turnTok
	val := []byte(strconv.FormatInt(epoch, 10))
	var (
		prev int64
		seen bool
	)
	err := jskv.CAS(ctx, "epoch of turn key "+turnTok, func() error {
		prev, seen = 0, false
		v, err := b.bk.Latest(ctx, k)
		if err != nil {
			return fmt.Errorf("kvinbox: read epoch: %w", err)
		}
		if !v.Exists {
			if v.Revision == 0 {
				_, err = b.kv.Create(ctx, k, val)
			} else {
				_, err = b.kv.Update(ctx, k, val, v.Revision)
			}
			return err
		}
		cur, perr := strconv.ParseInt(string(v.Value), 10, 64)
		if perr != nil {
			return fmt.Errorf("kvinbox: epoch of turn key %s is corrupt: %w", turnTok, perr)
		}
		prev, seen = cur, true
		if cur >= epoch {
			return nil
		}
		_, err = b.kv.Update(ctx, k, val, v.Revision)
		return err
	})
	if err != nil {
		return 0, false, err
	}
	return prev, seen, nil
}

// MarkSentLater writes the mark at once, in the background (there is no
// transaction to ride along with), and calls done when it is written. An
// entry this KV inserted is marked without reading it first, when it has
// not changed since (markFresh).
func (b *KV) MarkSentLater(project, id string, at time.Time, done func(first bool, err error)) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx, cancel := b.ctx(context.Background())
		defer cancel()
		if f, ok := b.fresh.take(project, id); ok && b.markFresh(ctx, f, at) {
			done(true, nil)
			return
		}
		_, changed, err := b.update(ctx, project, id, func(r *record) bool {
			if r.WakeupSentAt != nil {
				return false
			}
			t := at.UTC()
			r.WakeupSentAt = &t
			return true
		})
		done(changed && err == nil, err)
	}()
}

// Get returns the entry, or an error matching inbox.ErrNotFound.
func (b *KV) Get(ctx context.Context, project, id string) (*inbox.Entry, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	r, _, err := b.getRecord(ctx, project, id)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("%w: inbox entry %s in project %s", inbox.ErrNotFound, id, project)
	}
	return &r.Entry, nil
}

// Ack checks every id first (all or none for unknown ids), then acks the
// pending entries, a compare-and-set each, up to ackParallel at once. One
// id needs no check of its own: its compare-and-set reads it.
func (b *KV) Ack(ctx context.Context, project string, ids []string, now time.Time) (int, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	if len(ids) > 1 {
		ids = slices.Clone(ids) // sorted without duplicates: no two updates of one entry at once
		slices.Sort(ids)
		ids = slices.Compact(ids)
		if err := b.allExist(ctx, project, ids); err != nil {
			return 0, err
		}
	}
	var n atomic.Int64
	t := now.UTC()
	err := parallel.Each(len(ids), ackParallel, func(i int) error {
		id := ids[i]
		r, changed, err := b.update(ctx, project, id, func(r *record) bool {
			if r.State != inbox.StatePending {
				return false
			}
			r.State, r.AckedAt = inbox.StateAcked, &t
			return true
		})
		if len(ids) == 1 && errors.Is(err, inbox.ErrNotFound) {
			return inbox.NotFound(project, ids)
		}
		if err != nil {
			return err
		}
		if changed {
			n.Add(1)
			if err := b.bk.Drop(ctx, pendingKey(r)); err != nil {
				return fmt.Errorf("kvinbox: pending index of %s: %w", id, err)
			}
		}
		return nil
	})
	return int(n.Load()), err
}

// ackParallel bounds the entries one Ack works on at once (its existence
// check reads readParallel at once): each is a leader read and a
// compare-and-set, and a client gathers the acks of many calls in one
// request.
const ackParallel = 16

// allExist fails with inbox.NotFound, naming them, when some of ids are
// not entries of project.
func (b *KV) allExist(ctx context.Context, project string, ids []string) error {
	recs, err := b.readRecords(ctx, project, ids)
	if err != nil {
		return err
	}
	var missing []string
	for i, r := range recs {
		if r == nil {
			missing = append(missing, ids[i])
		}
	}
	if len(missing) > 0 {
		return inbox.NotFound(project, missing)
	}
	return nil
}

// AckLater has no transaction to ride along with: the ack is written at
// once, and the reply waits for it (every bucket write is replicated and
// on disk before it is acknowledged).
func (b *KV) AckLater(ctx context.Context, project string, ids []string, now time.Time, done func(error)) (int, error) {
	n, err := b.Ack(ctx, project, ids, now)
	if done != nil && err == nil {
		done(nil)
	}
	return n, err
}

// SetEpoch raises the turn's epoch with compare-and-set, then turns the
// turn's pending entries of older epochs stale.
func (b *KV) SetEpoch(ctx context.Context, project, turn string, epoch int64) (int64, []inbox.Entry, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	turnTok := hashToken(project, turn)
	prev, seen, err := b.raiseEpoch(ctx, project, turnTok, epoch)
	if err != nil {
		return 0, nil, err
	}
	if seen && prev >= epoch {
		return prev, nil, nil
	}
	ids, err := b.keys(ctx, "u."+project+"."+turnTok+".")
	if err != nil {
		return 0, nil, err
	}
	var staled []inbox.Entry
	for _, id := range ids {
		r, changed, err := b.update(ctx, project, id, func(r *record) bool {
			if r.State != inbox.StatePending || r.TurnEpoch >= epoch {
				return false
			}
			r.State = inbox.StateStale
			return true
		})
		if errors.Is(err, inbox.ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, nil, err
		}
		if changed {
			if err := b.bk.Drop(ctx, pendingKey(r)); err != nil {
				return 0, nil, fmt.Errorf("kvinbox: pending index of %s: %w", id, err)
			}
			staled = append(staled, r.Entry)
		}
	}
	return epoch, staled, nil
}

// Pending counts the keys of the pending index, across every project,
// from the stream leader's key list (one stream info request, no
// consumer: a consumer may read a replica that lags the insert just
// acknowledged). The first call of a KV also drops the delete markers a
// bucket written by an older version keeps on acked entries' pending
// keys (reading each pending key once); later ones only count.
func (b *KV) Pending(ctx context.Context) (int, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	if !b.markersGone.Load() {
		n := 0
		err := b.bk.ScanLatest(ctx, "p.>", func(k string, e jskv.Entry) error {
			if e.Exists {
				n++
				return nil
			}
			return b.bk.Drop(ctx, k)
		})
		if err != nil {
			return 0, fmt.Errorf("kvinbox: count pending entries: %w", err)
		}
		b.markersGone.Store(true)
		return n, nil
	}
	ks, err := b.bk.Keys(ctx, "p.>")
	if err != nil {
		return 0, fmt.Errorf("kvinbox: count pending entries: %w", err)
	}
	return len(ks), nil
}

// Close waits for the wakeup marks still being written. It does not
// touch the bucket, which the caller owns.
func (b *KV) Close() error {
	b.wg.Wait()
	return nil
}
