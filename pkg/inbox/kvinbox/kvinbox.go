package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// backend is where the inbox keeps its entries: a bbolt file (db, the
// default) or a JetStream key-value bucket (kvBackend, for a mesh whose
// state must survive the loss of a node). Both run the same conformance
// suite (backend_test.go).
type backend interface {
	insert(project, channel string, rep *utp.Report, traceparent string) (*Entry, outcome, error)
	markSentLater(project, id string, at time.Time, done func(first bool, err error))
	get(project, id string) (*Entry, error)
	list(project string, q ListQuery) ([]Entry, error)
	ack(project string, ids []string, now time.Time) (int, error)
	ackLater(project string, ids []string, now time.Time, done func(error)) (int, error)
	setEpoch(project, turn string, epoch int64) (int64, []Entry, error)
	pending() (int, error)
	close() error
}

var (
	_ backend = (*db)(nil)
	_ backend = (*kvBackend)(nil)
)

// DefaultBucket is the name of the inbox's key-value bucket in cluster mode.
const DefaultBucket = "utpmesh_inbox"

// OpenBucket creates (or opens) the inbox's key-value bucket with the given
// number of replicas (3 in a 3-node cluster, 1 on one server), for
// Config.Bucket.
func OpenBucket(ctx context.Context, js jetstream.JetStream, name string, replicas int) (*jskv.Bucket, error) {
	if name == "" {
		name = DefaultBucket
	}
	bk, err := jskv.Open(ctx, js, jskv.Config{Bucket: name, Replicas: replicas, History: 1, Description: "utpmesh inbox entries"})
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
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
// call wins), then writes e and the indexes. A crash in between leaves c
// naming an entry that may be missing or unindexed; the report is then not
// acknowledged, and its redelivery finds c, rebuilds what is missing from
// the report and returns the same inbox_id. Entry changes (ack, stale,
// wakeup mark) are compare-and-set updates of e, retried on conflict, so
// any number of inbox processes may share the bucket.
//
// Every read that decides something goes to the stream leader
// (jskv.Bucket.Latest, Scan): a replica may lag.
type kvBackend struct {
	bk      *jskv.Bucket
	kv      jetstream.KeyValue
	timeout time.Duration
	wg      sync.WaitGroup // background wakeup marks
}

func newKVBackend(bk *jskv.Bucket) *kvBackend {
	return &kvBackend{bk: bk, kv: bk.KV, timeout: 10 * time.Second}
}

// latest reads key from the leader; nil when it does not exist.
func (b *kvBackend) latest(ctx context.Context, key string) (*jskv.Entry, error) {
	e, err := b.bk.Latest(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("inbox: read %s: %w", key, err)
	}
	if !e.Exists {
		return nil, nil
	}
	return &e, nil
}

// settled reads a key a failed Create says exists. In a cluster the
// leader refuses a Create on a key whose first write is still being
// replicated, before that write is readable: wait for it (briefly).
func (b *kvBackend) settled(ctx context.Context, key string) (*jskv.Entry, error) {
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
	return nil, fmt.Errorf("inbox: %s exists (a Create failed) but is not readable from the stream leader", key)
}

// keys lists the keys matching prefix+"*", without the prefix.
func (b *kvBackend) keys(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	err := b.bk.Scan(ctx, prefix+"*", func(k string, e jskv.Entry) error {
		id := strings.TrimPrefix(k, prefix)
		if e.Exists {
			seen[id] = true
		} else {
			delete(seen, id)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: list %s*: %w", prefix, err)
	}
	for id := range seen {
		out = append(out, id)
	}
	sort.Strings(out)
	return out, nil
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

func (b *kvBackend) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), b.timeout)
}

func entryKey(project, id string) string { return "e." + project + "." + id }

func (b *kvBackend) getRecord(ctx context.Context, project, id string) (*record, uint64, error) {
	e, err := b.latest(ctx, entryKey(project, id))
	if err != nil || e == nil {
		return nil, 0, err
	}
	var r record
	if err := json.Unmarshal(e.Value, &r); err != nil {
		return nil, 0, fmt.Errorf("inbox: entry %s of project %s is corrupt: %w", id, project, err)
	}
	return &r, e.Revision, nil
}

// update applies change to the entry with compare-and-set, re-reading on
// conflict. change returns false to leave the entry as it is.
func (b *kvBackend) update(ctx context.Context, project, id string, change func(*record) bool) (*record, bool, error) {
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
			return fmt.Errorf("%w: inbox entry %s in project %s", ErrNotFound, id, project)
		}
		out = r
		if !change(r) {
			return nil
		}
		v, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("inbox: encode entry %s: %w", id, err)
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

func (b *kvBackend) insert(project, channel string, rep *utp.Report, traceparent string) (*Entry, outcome, error) {
	ctx, cancel := b.ctx()
	defer cancel()
	turnTok := hashToken(project, rep.AgentTurnID)
	callKey := "c." + project + "." + hashToken(project, rep.AgentTurnID, rep.ToolCallID)

	id := card.NewID()
	if _, err := b.kv.Create(ctx, callKey, []byte(id)); err != nil {
		if !isConflict(err) {
			return nil, 0, fmt.Errorf("inbox: dedupe key: %w", err)
		}
		v, gerr := b.settled(ctx, callKey)
		if gerr != nil {
			return nil, 0, gerr
		}
		existing := string(v.Value)
		r, _, err := b.getRecord(ctx, project, existing)
		if err != nil {
			return nil, 0, err
		}
		if r != nil {
			if err := b.index(ctx, r); err != nil {
				return nil, 0, err
			}
			if r.State == StatePending {
				// An ack (or set_epoch) between the read and index deleted
				// the pending key index just wrote back: take it out again.
				if now, _, err := b.getRecord(ctx, project, existing); err == nil && now != nil && now.State != StatePending {
					_ = b.kv.Delete(ctx, pendingKey(r))
				}
			}
			return &r.Entry, outcomeDuplicate, nil
		}
		// The first insert stopped after the dedupe key: finish it with
		// the id it chose.
		id = existing
	}
	// Only set_epoch raises a turn's epoch, as in the bbolt file: a
	// report is judged against it and never moves it.
	highest, seen, err := b.readEpoch(ctx, project, turnTok)
	if err != nil {
		return nil, 0, err
	}
	state := StatePending
	if seen && rep.TurnEpoch < highest {
		state = StateStale
	}
	now := time.Now().UTC()
	r := &record{Entry: Entry{
		InboxID: id, ProjectID: project, ChannelID: channel,
		AgentID: rep.AgentID, AgentTurnID: rep.AgentTurnID, TurnEpoch: rep.TurnEpoch,
		ToolCallID: rep.ToolCallID, ToolResultCardID: rep.ToolResultCardID,
		Status: rep.Status, AfterExecution: rep.AfterExecution,
		StepID: rep.StepID, ToolName: rep.ToolName,
		State: state, CreatedAt: now, Traceparent: traceparent,
	}}
	v, err := json.Marshal(r)
	if err != nil {
		return nil, 0, fmt.Errorf("inbox: encode entry %s: %w", id, err)
	}
	created := true
	if _, err := b.kv.Create(ctx, entryKey(project, id), v); err != nil {
		if !isConflict(err) {
			return nil, 0, fmt.Errorf("inbox: write entry %s: %w", id, err)
		}
		// Written concurrently by the first insert or another one
		// finishing it: that one is the new entry, this a duplicate.
		e, gerr := b.settled(ctx, entryKey(project, id))
		if gerr != nil {
			return nil, 0, gerr
		}
		var got record
		if err := json.Unmarshal(e.Value, &got); err != nil {
			return nil, 0, fmt.Errorf("inbox: entry %s of project %s is corrupt: %w", id, project, err)
		}
		r, created = &got, false
	}
	if err := b.index(ctx, r); err != nil {
		return nil, 0, err
	}
	// An epoch raised between our check and the insert must not leave a
	// pending entry older than the turn's highest epoch.
	if created && r.State == StatePending {
		if h, ok, err := b.readEpoch(ctx, project, turnTok); err == nil && ok && h > r.TurnEpoch {
			if st, changed, err := b.update(ctx, project, id, func(x *record) bool {
				if x.State != StatePending {
					return false
				}
				x.State = StateStale
				return true
			}); err == nil && changed {
				r = st
				_ = b.kv.Delete(ctx, pendingKey(r))
			}
		}
	}
	out := outcomeNew
	switch {
	case !created:
		out = outcomeDuplicate
	case r.State == StateStale:
		out = outcomeStale
	}
	return &r.Entry, out, nil
}

func pendingKey(r *record) string { return "p." + r.ProjectID + "." + r.AgentID + "." + r.InboxID }
func agentKey(r *record) string   { return "a." + r.ProjectID + "." + r.AgentID + "." + r.InboxID }
func turnKey(r *record) string {
	return "u." + r.ProjectID + "." + hashToken(r.ProjectID, r.AgentTurnID) + "." + r.InboxID
}

// index writes the entry's index keys (idempotent).
func (b *kvBackend) index(ctx context.Context, r *record) error {
	keys := []string{agentKey(r), turnKey(r)}
	if r.State == StatePending {
		keys = append(keys, pendingKey(r))
	}
	for _, k := range keys {
		if _, err := b.kv.Put(ctx, k, nil); err != nil {
			return fmt.Errorf("inbox: index %s: %w", k, err)
		}
	}
	return nil
}

func (b *kvBackend) readEpoch(ctx context.Context, project, turnTok string) (int64, bool, error) {
	v, err := b.latest(ctx, "t."+project+"."+turnTok)
	if err != nil || v == nil {
		return 0, false, err
	}
	n, err := strconv.ParseInt(string(v.Value), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("inbox: epoch of turn key %s is corrupt: %w", turnTok, err)
	}
	return n, true, nil
}

// raiseEpoch sets the turn's highest epoch to epoch when that is higher and
// returns the highest epoch before the call and whether there was one.
func (b *kvBackend) raiseEpoch(ctx context.Context, project, turnTok string, epoch int64) (int64, bool, error) {
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
			return fmt.Errorf("inbox: read epoch: %w", err)
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
			return fmt.Errorf("inbox: epoch of turn key %s is corrupt: %w", turnTok, perr)
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

func (b *kvBackend) markSentLater(project, id string, at time.Time, done func(first bool, err error)) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx, cancel := b.ctx()
		defer cancel()
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

func (b *kvBackend) get(project, id string) (*Entry, error) {
	ctx, cancel := b.ctx()
	defer cancel()
	r, _, err := b.getRecord(ctx, project, id)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("%w: inbox entry %s in project %s", ErrNotFound, id, project)
	}
	return &r.Entry, nil
}

// list reads the agent's index keys (the pending ones for pending
// entries), orders them by creation (inbox ids are UUIDv7, time-ordered;
// ties by created_at), and reads the entries.
func (b *kvBackend) list(project string, q ListQuery) ([]Entry, error) {
	ctx, cancel := b.ctx()
	defer cancel()
	kind := "a."
	if q.State == StatePending {
		kind = "p."
	}
	ids, err := b.keys(ctx, kind+project+"."+q.AgentID+".")
	if err != nil {
		return nil, err
	}
	var recs []*record
	for _, id := range ids {
		r, _, err := b.getRecord(ctx, project, id)
		if err != nil {
			return nil, err
		}
		if r != nil {
			recs = append(recs, r)
		}
	}
	sort.Slice(recs, func(i, j int) bool {
		if !recs[i].CreatedAt.Equal(recs[j].CreatedAt) {
			return recs[i].CreatedAt.Before(recs[j].CreatedAt)
		}
		return recs[i].InboxID < recs[j].InboxID
	})
	start := 0
	if q.After != "" {
		after, _, err := b.getRecord(ctx, project, q.After)
		if err != nil {
			return nil, err
		}
		if after == nil || after.AgentID != q.AgentID {
			return nil, fmt.Errorf("%w: after: inbox entry %s of agent %s in project %s", ErrNotFound, q.After, q.AgentID, project)
		}
		start = sort.Search(len(recs), func(i int) bool {
			if !recs[i].CreatedAt.Equal(after.CreatedAt) {
				return recs[i].CreatedAt.After(after.CreatedAt)
			}
			return recs[i].InboxID > after.InboxID
		})
	}
	out := []Entry{}
	for _, r := range recs[start:] {
		if len(out) >= q.Limit {
			break
		}
		if q.AgentTurnID != "" && r.AgentTurnID != q.AgentTurnID {
			continue
		}
		if q.State != StateAll && r.State != q.State {
			continue
		}
		out = append(out, r.Entry)
	}
	return out, nil
}

func (b *kvBackend) ack(project string, ids []string, now time.Time) (int, error) {
	ctx, cancel := b.ctx()
	defer cancel()
	// All or none for unknown ids: check them first.
	var missing []string
	for _, id := range ids {
		r, _, err := b.getRecord(ctx, project, id)
		if err != nil {
			return 0, err
		}
		if r == nil {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return 0, fmt.Errorf("%w: inbox entries not in project %s: %s", ErrNotFound, project, listIDs(missing))
	}
	n := 0
	t := now.UTC()
	for _, id := range ids {
		r, changed, err := b.update(ctx, project, id, func(r *record) bool {
			if r.State != StatePending {
				return false
			}
			r.State, r.AckedAt = StateAcked, &t
			return true
		})
		if err != nil {
			return n, err
		}
		if changed {
			n++
			if err := b.kv.Delete(ctx, pendingKey(r)); err != nil {
				return n, fmt.Errorf("inbox: pending index of %s: %w", id, err)
			}
		}
	}
	return n, nil
}

// ackLater has no transaction to ride along with: the ack is written at
// once, and the reply waits for it (every bucket write is replicated and
// on disk before it is acknowledged).
func (b *kvBackend) ackLater(project string, ids []string, now time.Time, done func(error)) (int, error) {
	n, err := b.ack(project, ids, now)
	if done != nil && err == nil {
		done(nil)
	}
	return n, err
}

func (b *kvBackend) setEpoch(project, turn string, epoch int64) (int64, []Entry, error) {
	ctx, cancel := b.ctx()
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
	var staled []Entry
	for _, id := range ids {
		r, changed, err := b.update(ctx, project, id, func(r *record) bool {
			if r.State != StatePending || r.TurnEpoch >= epoch {
				return false
			}
			r.State = StateStale
			return true
		})
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, nil, err
		}
		if changed {
			if err := b.kv.Delete(ctx, pendingKey(r)); err != nil {
				return 0, nil, fmt.Errorf("inbox: pending index of %s: %w", id, err)
			}
			staled = append(staled, r.Entry)
		}
	}
	return epoch, staled, nil
}

func (b *kvBackend) pending() (int, error) {
	ctx, cancel := b.ctx()
	defer cancel()
	live := map[string]bool{}
	err := b.bk.Scan(ctx, "p.>", func(k string, e jskv.Entry) error {
		if e.Exists {
			live[k] = true
		} else {
			delete(live, k)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("inbox: count pending entries: %w", err)
	}
	return len(live), nil
}

func (b *kvBackend) close() error {
	b.wg.Wait()
	return nil
}
