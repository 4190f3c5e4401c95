// Package jskv is the plumbing shared by the mesh's JetStream KV backends
// (pkg/registry/jsreg, pkg/authz/policystore/jspolicy, pkg/inbox/kvinbox):
// it opens a bucket with a replica count and a per-key history, reads
// from the stream leader (Latest: one key; Scan: every kept message of
// matching keys), runs compare-and-set loops (CAS) and creates several
// keys in one atomic batch (CreateAll, Config.Atomic).
//
// # Why leader reads
//
// kv.Get is a JetStream direct get, which in a cluster the nearest
// replica answers, and a replica can lag the leader: on a 3-node cluster a
// direct get through one node right after a put through another returned
// the previous value (jsreg's TestClusterReadAfterWrite, before its reads
// moved to the leader). kv.History and watchers use an ordered consumer,
// which JetStream places on any replica. A compare-and-set write
// (kv.Update with the read revision) is checked by the leader, so a stale
// read there only costs a retry, but a write path that decides NOT to
// write from what it read — "no such key", "the stored version is not your
// base", "the stored text is the same" — must not decide on a stale read.
// Latest and Scan use $JS.API.STREAM.MSG.GET, which only the stream leader
// answers in a cluster; they cost more than a direct get (see the
// backends' benchmarks).
//
// # Deadlines
//
// In a cluster, a stream without a leader (no quorum, an election under
// way) does not answer a leader read at all. Every read is therefore bounded
// (Config.Timeout, else deadline.Default) when its context has no deadline,
// and fails with an error matching context.DeadlineExceeded; writes go
// through nats.go's jetstream package, which bounds them itself.
//
// # Failover
//
// A read is sent in attempts of at most Config.Attempt (DefaultAttempt)
// each: one that gets no answer, no responders, or JetStream's "temporarily
// unavailable" is sent again, after a short pause, until the read's bound
// ends. When a bucket's leader is lost, the others elect a new one (4–9 s,
// nats-server's RAFT election timeout); a read asked during the election
// then succeeds within an attempt of the new leader, instead of waiting
// out its whole deadline for a request the lost leader will never answer
// (measured: BenchmarkClusterFailover in pkg/mesh).
package jskv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/deadline"
)

// ErrContention is returned by CAS when every attempt met a concurrent
// writer.
var ErrContention = errors.New("jskv: too many concurrent writers")

// Config says how to open a bucket.
type Config struct {
	// Bucket is the KV bucket name ([A-Za-z0-9_-]+).
	Bucket string
	// Replicas is the bucket's replica count: 1 on a single server, 3 in a
	// cluster (a write is acknowledged once a majority stored it). 0 means 1.
	Replicas int
	// History is how many revisions of each key are kept (1..64; 0 means 1).
	History int
	// Description is stored with the bucket.
	Description string
	// Timeout bounds a leader read (Latest, each step of Scan) whose
	// context has no deadline; 0 means deadline.Default. A stream without
	// a leader never answers: the read then fails with an error matching
	// context.DeadlineExceeded instead of waiting.
	Timeout time.Duration
	// Attempt bounds one request of a leader read; a request unanswered
	// within it is sent again (see Failover). 0 means DefaultAttempt.
	Attempt time.Duration
	// Atomic turns atomic batches on for the bucket's stream (nats-server
	// 2.12 and later), for CreateAll; Bucket.Atomic says whether the
	// server took the setting.
	Atomic bool
}

// DefaultAttempt is Config.Attempt's default: far above a leader read's
// time on a loaded cluster (milliseconds), and short enough that a read
// asked during a leader election is answered soon after the new leader
// is elected.
const DefaultAttempt = 2 * time.Second

// retryPause bounds the pause between two attempts of a leader read.
const retryPause = 250 * time.Millisecond

// Bucket is an open KV bucket.
type Bucket struct {
	// KV is the bucket for ordinary reads (direct gets), watches and writes.
	KV jetstream.KeyValue
	nc *nats.Conn
	// getSubj is the leader-only message-get API subject of the stream.
	getSubj string
	// purgeSubj is the stream's purge API subject (Drop).
	purgeSubj string
	// infoSubj is the stream's info API subject (Keys).
	infoSubj string
	// keyPre is the subject prefix of the bucket's keys.
	keyPre string
	// timeout bounds a leader read whose context has no deadline.
	timeout time.Duration
	// attempt bounds one request of a leader read.
	attempt time.Duration
	// within makes timeout bound every leader read, even one whose
	// context has a later deadline (Bind).
	within bool
	// js publishes CreateAll's commits.
	js jetstream.JetStream
	// atomic: the stream takes atomic batches (CreateAll).
	atomic bool
	// batches bounds CreateAll's open batches (MaxInflightBatches).
	batches chan struct{}
}

// Open creates the bucket, or updates its configuration to cfg when it
// exists (so raising Replicas in the configuration scales the bucket). The
// error says what to change when the servers cannot place the replicas.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Bucket, error) {
	if cfg.Bucket == "" || strings.Trim(cfg.Bucket, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		return nil, fmt.Errorf("jskv: bucket name %q: use letters, digits, _ and - only", cfg.Bucket)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.Replicas < 0 || cfg.Replicas > 5 {
		return nil, fmt.Errorf("jskv: bucket %s: replicas is %d; use 1 (single server) or 3 (cluster), at most 5", cfg.Bucket, cfg.Replicas)
	}
	if cfg.History == 0 {
		cfg.History = 1
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("jskv: bucket %s: timeout is %v; use a positive duration, or 0 for the default %v", cfg.Bucket, cfg.Timeout, deadline.Default)
	}
	if cfg.Attempt < 0 {
		return nil, fmt.Errorf("jskv: bucket %s: attempt is %v; use a positive duration, or 0 for the default %v", cfg.Bucket, cfg.Attempt, DefaultAttempt)
	}
	if cfg.Attempt == 0 {
		cfg.Attempt = DefaultAttempt
	}
	if cfg.History < 1 || cfg.History > jetstream.KeyValueMaxHistory {
		return nil, fmt.Errorf("jskv: bucket %s: history is %d; JetStream KV keeps 1 to %d revisions per key", cfg.Bucket, cfg.History, jetstream.KeyValueMaxHistory)
	}
	kv, err := configured(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	if kv == nil {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: cfg.Bucket, Description: cfg.Description, History: uint8(cfg.History),
			Replicas: cfg.Replicas, Storage: jetstream.FileStorage,
		})
	}
	if err != nil {
		if cfg.Replicas > 1 && (strings.Contains(err.Error(), "replicas") || strings.Contains(err.Error(), "insufficient resources")) {
			return nil, fmt.Errorf("jskv: bucket %s with %d replicas: %w (a single server or a cluster smaller than %d nodes holds only 1 replica: set replicas to 1, or add nodes)", cfg.Bucket, cfg.Replicas, err, cfg.Replicas)
		}
		return nil, fmt.Errorf("jskv: bucket %s: %w", cfg.Bucket, err)
	}
	b := newBucket(js, kv, cfg.Timeout, cfg.Attempt)
	if cfg.Atomic {
		if b.atomic, err = allowAtomic(ctx, js, kvStream(cfg.Bucket)); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// kvStream is the name of a bucket's stream.
func kvStream(bucket string) string { return "KV_" + bucket }

// configured returns the bucket when its stream exists with cfg's
// settings and atomic batches on already, nil when Open must create or
// update it. It spares a node that starts the update that turns the
// setting off, until Open turns it on again, under the other nodes'
// writes (CreateOrUpdateKeyValue does not know it): their batches would
// be refused meanwhile.
func configured(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.KeyValue, error) {
	if !cfg.Atomic {
		return nil, nil
	}
	st, err := js.Stream(ctx, kvStream(cfg.Bucket))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("jskv: bucket %s: %w", cfg.Bucket, err)
	}
	sc := st.CachedInfo().Config
	if !sc.AllowAtomicPublish || sc.Replicas != cfg.Replicas || sc.MaxMsgsPerSubject != int64(cfg.History) || sc.Description != cfg.Description {
		return nil, nil
	}
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("jskv: bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// Bind returns a Bucket over kv, a bucket that exists already, without
// creating or configuring its stream: for an identity that manages no
// stream and may only read and write the bucket. Its leader reads need
// publish permission on $JS.API.STREAM.MSG.GET.KV_<bucket> only (no
// consumer). Each of them is bounded by timeout (0: deadline.Default)
// even when its context allows longer, so that one lost reply costs this
// long, not the caller's whole deadline.
func Bind(js jetstream.JetStream, kv jetstream.KeyValue, timeout time.Duration) (*Bucket, error) {
	if timeout < 0 {
		return nil, fmt.Errorf("jskv: bucket %s: timeout is %v; use a positive duration, or 0 for the default %v", kv.Bucket(), timeout, deadline.Default)
	}
	b := newBucket(js, kv, timeout, DefaultAttempt)
	b.within = true
	return b, nil
}

func newBucket(js jetstream.JetStream, kv jetstream.KeyValue, timeout, attempt time.Duration) *Bucket {
	prefix := js.Options().APIPrefix
	if prefix == "" {
		prefix = jetstream.DefaultAPIPrefix
	}
	if !strings.HasSuffix(prefix, ".") {
		prefix += "."
	}
	name := kv.Bucket()
	return &Bucket{
		KV: kv, nc: js.Conn(), js: js, batches: make(chan struct{}, MaxInflightBatches),
		getSubj:   prefix + "STREAM.MSG.GET.KV_" + name,
		purgeSubj: prefix + "STREAM.PURGE.KV_" + name,
		infoSubj:  prefix + "STREAM.INFO.KV_" + name,
		keyPre:    "$KV." + name + ".",
		timeout:   timeout, attempt: attempt,
	}
}

// Entry is a key's latest revision as the leader has it.
type Entry struct {
	// Value is the stored value; nil when the key is absent or deleted.
	Value []byte
	// Revision is the stream sequence of the latest message on the key
	// (a delete marker included), 0 when the key never existed or was
	// purged: the revision a compare-and-set write must name.
	Revision uint64
	// Exists is false when the key is absent or its latest revision is a
	// delete marker.
	Exists bool
}

// msgGetResponse is the reply of $JS.API.STREAM.MSG.GET.
type msgGetResponse struct {
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error,omitempty"`
	Message *struct {
		Subject string `json:"subject"`
		Seq     uint64 `json:"seq"`
		Hdrs    []byte `json:"hdrs,omitempty"`
		Data    []byte `json:"data,omitempty"`
	} `json:"message,omitempty"`
}

// errCodeNoMessage is JetStream's "no message found" error code.
const errCodeNoMessage = 10037

// Latest returns key's latest revision, read from the stream leader.
func (b *Bucket) Latest(ctx context.Context, key string) (Entry, error) {
	_, e, found, err := b.msgGet(ctx, map[string]any{"last_by_subj": b.keyPre + key})
	if err != nil || !found {
		return Entry{}, err
	}
	return e, nil
}

// Scan calls fn, in revision order, for every stored message (values and
// delete markers) whose key matches filter (a key or a pattern with * and
// >), read from the stream leader one message per request. A bucket with
// a history of 1 holds one message per key, so fn sees each key once,
// unless the key is written during the scan (then again later, newer).
func (b *Bucket) Scan(ctx context.Context, filter string, fn func(key string, e Entry) error) error {
	for seq := uint64(1); ; {
		key, e, found, err := b.msgGet(ctx, map[string]any{"seq": seq, "next_by_subj": b.keyPre + filter})
		if err != nil || !found {
			return err
		}
		if err := fn(key, e); err != nil {
			return err
		}
		seq = e.Revision + 1
	}
}

// msgGet asks the stream leader for one message; found is false when no
// message matches.
func (b *Bucket) msgGet(ctx context.Context, body map[string]any) (key string, e Entry, found bool, err error) {
	req, err := json.Marshal(body)
	if err != nil {
		return "", Entry{}, false, err
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	resp, err := b.leaderRequest(ctx, req)
	if err != nil {
		return "", Entry{}, false, err
	}
	if resp.Error != nil {
		if resp.Error.ErrCode == errCodeNoMessage {
			return "", Entry{}, false, nil
		}
		return "", Entry{}, false, fmt.Errorf("jskv: read: %s (code %d, err_code %d)", resp.Error.Description, resp.Error.Code, resp.Error.ErrCode)
	}
	m := resp.Message
	if m == nil {
		return "", Entry{}, false, errors.New("jskv: read: reply without message")
	}
	e = Entry{Value: m.Data, Revision: m.Seq, Exists: true}
	if len(m.Hdrs) > 0 {
		h, err := nats.DecodeHeadersMsg(m.Hdrs)
		if err != nil {
			return "", Entry{}, false, fmt.Errorf("jskv: read: headers: %w", err)
		}
		if op := h.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			e.Value, e.Exists = nil, false
		}
	}
	return strings.TrimPrefix(m.Subject, b.keyPre), e, true, nil
}

// errCodeUnavailable is JetStream's "JetStream system temporarily
// unavailable" (a stream or the meta group without a leader).
const errCodeUnavailable = 10008

// leaderRequest sends a message-get request to the stream leader in
// attempts of b.attempt until one is answered (see Failover) or ctx ends.
func (b *Bucket) leaderRequest(ctx context.Context, req []byte) (*msgGetResponse, error) {
	pause := 25 * time.Millisecond
	for {
		actx, cancel := deadline.Within(ctx, b.attempt)
		msg, err := deadline.Request(actx, b.nc, b.getSubj, req)
		cancel()
		var resp msgGetResponse
		if err == nil {
			if err := json.Unmarshal(msg.Data, &resp); err != nil {
				return nil, fmt.Errorf("jskv: read: malformed reply: %w", err)
			}
			if resp.Error == nil || resp.Error.ErrCode != errCodeUnavailable {
				return &resp, nil
			}
			err = fmt.Errorf("%s (code %d, err_code %d)", resp.Error.Description, resp.Error.Code, resp.Error.ErrCode)
		} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("jskv: read from the stream leader of %s: %w", b.KV.Bucket(), err)
		}
		// Unanswered, no responders, or no leader: ask again after a
		// pause, while the read's bound lasts.
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("jskv: read from the stream leader of %s: no answer before the read's deadline (the bucket has no leader: an election under way, or no quorum), last: %v: %w", b.KV.Bucket(), err, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, retryPause)
	}
}

// MaxAttempts bounds a CAS loop.
const MaxAttempts = 50

// CAS runs attempt until it returns anything but a revision mismatch (a
// concurrent writer won the compare-and-set), waiting a little, with
// jitter, between attempts. attempt reads with Latest and writes with
// kv.Update / kv.Create / kv.Delete(LastRevision). After MaxAttempts it
// returns an error matching ErrContention.
func CAS(ctx context.Context, what string, attempt func() error) error {
	wait := time.Millisecond
	for range MaxAttempts {
		err := attempt()
		if !Conflict(err) {
			return err
		}
		t := time.NewTimer(wait/2 + rand.N(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
	return fmt.Errorf("%w: %s lost the compare-and-set %d times in a row; retry", ErrContention, what, MaxAttempts)
}

// Conflict reports whether err is a lost compare-and-set.
func Conflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

// Closed reports whether err says the NATS connection is closed.
func Closed(err error) bool {
	return errors.Is(err, nats.ErrConnectionClosed)
}
