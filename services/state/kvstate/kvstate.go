// Package kvstate keeps a tool service's state (package state) in a
// JetStream KV bucket that every worker of the service shares, so that two
// workers of atlas.tasks, or of atp, on two hosts serve one dataset, and
// the data has as many replicas as the bucket (R1, or R3 on a cluster).
//
// # Layout
//
// The bucket is Config.Bucket (atlas_<group>, atp_state). Its key ModeKey
// records the service's state mode (mode.go). A value lives under the key
// <project>.<bucket>.<key>, each token kept as it is when it consists of
// letters, digits, '-' and '_', and written as '=' followed by its
// unpadded base64url encoding otherwise (so "task_0a1b" stays readable in
// "nats kv ls" and "2024-01-15\x00blk_1" becomes "=MjAy..."). Each project
// has a version key, <project>._v, that every committed write transaction
// of the project advances.
//
// # Transactions
//
// A transaction reads the version key of a project before it reads
// anything else of it, and buffers its writes. Update commits them as one
// JetStream atomic batch (the stream allows atomic publish) whose last
// messages re-put the version key of every project the transaction
// touched, each with Nats-Expected-Last-Subject-Sequence set to the
// revision it read: the batch is stored whole only if no other transaction
// committed to those projects since, and is refused whole otherwise. A
// refused commit re-runs the closure with fresh reads, after a short
// randomized pause, at most Config.MaxAttempts times (then
// state.ErrConflict). So transactions are serializable per project, and a
// crash mid-commit leaves all or nothing.
//
// View re-reads the version keys after its closure and runs it again when
// one moved, so it also sees one consistent state.
//
// The stream's direct get is switched off: every read goes to the stream
// leader, so a worker reads what another worker's acknowledged commit
// wrote.
//
// A Scan and Projects read the bucket without a consumer: they list the
// matching keys with $JS.API.STREAM.INFO (a subjects filter) and read
// each key's latest value with $JS.API.STREAM.MSG.GET, several requests
// in flight (jskv.Bucket.ScanLatest); only the stream leader answers
// either, so they are as fresh as every other read. A worker identity therefore needs no
// consumer on its bucket (PublishSubjects): a push consumer's deliver
// subject is not checked against its creator's permissions, so one it
// could create would deliver the bucket's values on any subject.
//
// Caveats: a Scan costs one leader read per stored key of the scanned
// group (docs/performance.md), and Projects one stream info: both suit
// the personal-scale data ATLAS and ATP keep (thousands of keys per
// bucket), not millions.
package kvstate

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/services/state"
)

// Defaults of Config.
const (
	DefaultMaxAttempts = 32
	// versionToken names a project's version key (<project>._v).
	versionToken = "_v"
)

// JetStream error codes that mean "another transaction committed first".
const (
	codeWrongLastSequence      = 10071
	codeWrongLastSequenceConst = 10164
)

// Config configures a Store.
type Config struct {
	// Bucket is the KV bucket name, e.g. atlas_tasks or atp_state.
	// Required.
	Bucket string
	// Replicas of the bucket's stream: 1 or 3 on a cluster of at least
	// three servers. An existing bucket with another count is updated to
	// this one. 0 adopts an existing bucket's count and creates a missing
	// one with 1 (a worker that manages no stream passes 0).
	Replicas int
	// MaxAttempts bounds how often Update runs its closure when commits
	// conflict; default DefaultMaxAttempts.
	MaxAttempts int
	// Description is the bucket's description.
	Description string
	// Timeout bounds each request to the bucket (a read, a commit)
	// whatever the transaction's context allows, so that a reply lost in a
	// node's failure costs this long, not the whole call; 0 means
	// deadline.Default.
	Timeout time.Duration
}

// Store is a group's state in a JetStream KV bucket.
type Store struct {
	// wmu runs this handle's Updates one at a time, so that the writers
	// of one process never conflict with each other; conflicts come from
	// other processes only.
	wmu sync.Mutex
	nc  *nats.Conn
	kv  jetstream.KeyValue
	// lead reads through the stream leader without a consumer (Scan,
	// Projects).
	lead *jskv.Bucket
	cfg  Config
	// subject prefix of the bucket's keys: $KV.<bucket>.
	prefix string
}

var _ state.Store = (*Store)(nil)

// Open creates the bucket (or adopts an existing one) and configures its
// stream for atomic batches and leader reads.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("kvstate: Config.Bucket is required")
	}
	if cfg.Replicas < 0 || cfg.Replicas > 5 {
		return nil, fmt.Errorf("kvstate: %d replicas: use 1, or 3 on a cluster of at least three servers", cfg.Replicas)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("kvstate: timeout %v: use a positive duration, or 0 for the default %v", cfg.Timeout, deadline.Default)
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	// While a cluster elects leaders (three nodes started at once) a
	// bucket request can go unanswered and succeed when sent again:
	// retry timeouts, with growing bounds, for up to openPatience.
	var st *Store
	err = deadline.Patiently(ctx, openPatience, nil, func(ctx context.Context) error {
		var err error
		st, err = open(ctx, nc, js, cfg)
		return err
	})
	return st, err
}

// openPatience bounds Open's retries of requests that timed out.
const openPatience = 2 * time.Minute

func open(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Store, error) {
	stream := "KV_" + cfg.Bucket
	info, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: cfg.Bucket, Description: cfg.Description,
			History: 1, Storage: jetstream.FileStorage, Replicas: max(cfg.Replicas, 1)})
		cerr := err
		// Another worker may have created (and configured) it meanwhile.
		if info, err = js.Stream(ctx, stream); err != nil && cerr != nil {
			hint := ""
			if cfg.Replicas > 1 {
				hint = fmt.Sprintf(" (R%d needs a NATS cluster of at least %d servers; use 1 replica on a single server)", cfg.Replicas, cfg.Replicas)
			}
			return nil, fmt.Errorf("kvstate: create bucket %s (R%d): %w%s", cfg.Bucket, max(cfg.Replicas, 1), cerr, hint)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kvstate: bucket %s: %w", cfg.Bucket, err)
	}
	sc := info.CachedInfo().Config
	if cfg.Replicas == 0 {
		cfg.Replicas = max(sc.Replicas, 1)
	}
	if !sc.AllowAtomicPublish || sc.AllowDirect || sc.Replicas != cfg.Replicas {
		sc.AllowAtomicPublish, sc.AllowDirect, sc.Replicas = true, false, cfg.Replicas
		if _, err := js.UpdateStream(ctx, sc); err != nil {
			return nil, fmt.Errorf("kvstate: configure bucket %s (atomic batches, leader reads, R%d): %w (atomic batches need nats-server 2.12 or later)", cfg.Bucket, cfg.Replicas, err)
		}
	}
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("kvstate: bind bucket %s: %w", cfg.Bucket, err)
	}
	lead, err := jskv.Bind(js, kv, cfg.Timeout)
	if err != nil {
		return nil, fmt.Errorf("kvstate: %w", err)
	}
	return &Store{nc: nc, kv: kv, lead: lead, cfg: cfg, prefix: "$KV." + cfg.Bucket + "."}, nil
}

// PublishSubjects are the subjects a NATS user must be allowed to publish
// to for a Store on bucket to adopt it, read, scan and commit (besides
// subscribing to its own reply inboxes): what a worker identity of the
// group needs. They manage no stream: the bucket is created and
// configured by the mesh core (`utpmesh up` serving the group with the
// replicated state), never by a worker. They create no consumer either:
// every read is a leader read (STREAM.MSG.GET), since nats-server does
// not check a push consumer's deliver subject against its creator's
// permissions.
func PublishSubjects(bucket string) []string {
	st := "KV_" + bucket
	return []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO." + st,
		"$JS.API.STREAM.MSG.GET." + st,
		"$KV." + bucket + ".>",
	}
}

// Close does nothing: the connection belongs to the caller.
func (s *Store) Close() error { return nil }

// View runs fn until it sees one consistent state (bounded by MaxAttempts).
func (s *Store) View(ctx context.Context, fn func(state.Tx) error) error {
	for attempt := 1; ; attempt++ {
		t := s.newTx(ctx, false)
		if err := fn(t); err != nil {
			return err
		}
		same, err := t.unchanged()
		if err != nil || same {
			return err
		}
		if attempt >= s.cfg.MaxAttempts {
			return fmt.Errorf("%w: %s kept changing while it was read (%d attempts)", state.ErrConflict, s.cfg.Bucket, attempt)
		}
		if err := pause(ctx, attempt); err != nil {
			return err
		}
	}
}

// Update runs fn and commits its writes; a conflicting commit runs fn
// again (see the package doc).
func (s *Store) Update(ctx context.Context, fn func(state.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := s.attempt(ctx, fn)
		if !errors.Is(err, errConflict) {
			return err
		}
		if attempt >= s.cfg.MaxAttempts {
			return fmt.Errorf("%w: %s: %d commits conflicted with other writers", state.ErrConflict, s.cfg.Bucket, attempt)
		}
		if err := pause(ctx, attempt); err != nil {
			return err
		}
	}
}

// attempt runs fn once and commits, holding the handle's write lock.
func (s *Store) attempt(ctx context.Context, fn func(state.Tx) error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	t := s.newTx(ctx, true)
	if err := fn(t); err != nil {
		return err
	}
	return t.commit()
}

// pause waits a random time up to an exponentially growing bound (1ms
// doubling to 128ms), so that conflicting writers spread out.
func pause(ctx context.Context, attempt int) error {
	d := time.Duration(rand.Int64N(int64(time.Millisecond)<<min(attempt, 8))) + time.Millisecond/2
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

var errConflict = errors.New("kvstate: commit conflict")

// write is one buffered write; del marks a delete.
type write struct {
	value []byte
	del   bool
}

type tx struct {
	ctx      context.Context
	s        *Store
	writable bool
	// versions holds the revision of each touched project's version key
	// (0: absent).
	versions map[string]uint64
	writes   map[string]write // KV key → write
	order    []string         // KV keys in first-write order
}

func (s *Store) newTx(ctx context.Context, writable bool) *tx {
	return &tx{ctx: ctx, s: s, writable: writable, versions: map[string]uint64{}, writes: map[string]write{}}
}

func (t *tx) Writable() bool { return t.writable }

func (t *tx) Bucket(project, name string) state.Bucket {
	return &bucket{t: t, project: project, base: encode(project) + "." + encode(name) + "."}
}

// touch reads a project's version key once per transaction, before the
// transaction reads anything else of the project.
func (t *tx) touch(project string) error {
	if _, ok := t.versions[project]; ok {
		return nil
	}
	rev, err := t.version(project)
	if err != nil {
		return err
	}
	t.versions[project] = rev
	return nil
}

func (t *tx) version(project string) (uint64, error) {
	ctx, cancel := deadline.Within(t.ctx, t.s.cfg.Timeout)
	defer cancel()
	e, err := t.s.kv.Get(ctx, encode(project)+"."+versionToken)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("kvstate: %s: read version of project %s: %w", t.s.cfg.Bucket, project, err)
	}
	return e.Revision(), nil
}

// unchanged reports whether every touched project's version key is still
// at the revision the transaction read.
func (t *tx) unchanged() (bool, error) {
	for p, rev := range t.versions {
		now, err := t.version(p)
		if err != nil {
			return false, err
		}
		if now != rev {
			return false, nil
		}
	}
	return true, nil
}

func (t *tx) Projects() ([]string, error) {
	// Version keys are never deleted: their subjects are the projects.
	keys, err := t.s.lead.Keys(t.ctx, "*."+versionToken)
	if err != nil {
		return nil, fmt.Errorf("kvstate: %s: list projects: %w", t.s.cfg.Bucket, err)
	}
	var out []string
	for _, k := range keys {
		tok, _, _ := strings.Cut(k, ".")
		p, err := decode(tok)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// commit publishes the buffered writes as one atomic batch.
func (t *tx) commit() error {
	if len(t.order) == 0 {
		return nil
	}
	projects := make([]string, 0, len(t.versions))
	for p := range t.versions {
		projects = append(projects, p)
	}
	sort.Strings(projects)
	id := crand.Text()
	msgs := make([]*nats.Msg, 0, len(projects)+len(t.order))
	// The data first, the version keys last: a replica whose copy of a
	// version key is at revision r has every write committed with it
	// (Scan relies on that).
	for _, k := range t.order {
		w := t.writes[k]
		m := nats.NewMsg(t.s.prefix + k)
		if w.del {
			m.Header.Set("KV-Operation", "DEL")
		} else {
			m.Data = w.value
		}
		msgs = append(msgs, m)
	}
	for _, p := range projects {
		m := nats.NewMsg(t.s.prefix + encode(p) + "." + versionToken)
		m.Data = []byte(id)
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(t.versions[p], 10))
		msgs = append(msgs, m)
	}
	for i, m := range msgs {
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if i < len(msgs)-1 {
			if err := t.s.nc.PublishMsg(m); err != nil {
				return fmt.Errorf("kvstate: %s: commit: %w", t.s.cfg.Bucket, err)
			}
		}
	}
	last := msgs[len(msgs)-1]
	last.Header.Set("Nats-Batch-Commit", "1")
	ctx, cancel := deadline.Within(t.ctx, t.s.cfg.Timeout)
	defer cancel()
	resp, err := deadline.RequestMsg(ctx, t.s.nc, last)
	if err != nil {
		return fmt.Errorf("%w: kvstate: %s: commit: %w", state.ErrUnknownOutcome, t.s.cfg.Bucket, err)
	}
	var ack struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return fmt.Errorf("kvstate: %s: commit: unreadable acknowledgement %q: %w", t.s.cfg.Bucket, resp.Data, err)
	}
	if e := ack.Error; e != nil {
		if e.ErrorCode == codeWrongLastSequence || e.ErrorCode == codeWrongLastSequenceConst {
			return errConflict
		}
		return fmt.Errorf("kvstate: %s: commit refused: %w", t.s.cfg.Bucket, e)
	}
	return nil
}

type bucket struct {
	t       *tx
	project string
	base    string // <project>.<name>. (encoded)
}

func (b *bucket) Get(key string) ([]byte, bool, error) {
	if err := b.t.touch(b.project); err != nil {
		return nil, false, err
	}
	k := b.base + encode(key)
	if w, ok := b.t.writes[k]; ok {
		if w.del {
			return nil, false, nil
		}
		return w.value, true, nil
	}
	ctx, cancel := deadline.Within(b.t.ctx, b.t.s.cfg.Timeout)
	defer cancel()
	e, err := b.t.s.kv.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("kvstate: %s: get %s: %w", b.t.s.cfg.Bucket, k, err)
	}
	v := e.Value()
	if v == nil {
		v = []byte{}
	}
	return v, true, nil
}

func (b *bucket) set(key string, w write) error {
	if !b.t.writable {
		return state.ErrReadOnly
	}
	if key == "" {
		return errors.New("state: empty key")
	}
	if err := b.t.touch(b.project); err != nil {
		return err
	}
	k := b.base + encode(key)
	if _, ok := b.t.writes[k]; !ok {
		b.t.order = append(b.t.order, k)
	}
	b.t.writes[k] = w
	return nil
}

func (b *bucket) Put(key string, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	return b.set(key, write{value: value})
}

func (b *bucket) Delete(key string) error { return b.set(key, write{del: true}) }

func (b *bucket) Scan(prefix string, reverse bool, fn func(string, []byte) error) error {
	if err := b.t.touch(b.project); err != nil {
		return err
	}
	vals, err := b.list()
	if err != nil {
		return err
	}
	for k, wr := range b.t.writes {
		if !strings.HasPrefix(k, b.base) {
			continue
		}
		if wr.del {
			delete(vals, k)
		} else {
			vals[k] = wr.value
		}
	}
	type kv struct {
		key string
		val []byte
	}
	var list []kv
	for k, v := range vals {
		key, err := decode(k[len(b.base):])
		if err != nil {
			return err
		}
		if strings.HasPrefix(key, prefix) {
			if v == nil {
				v = []byte{}
			}
			list = append(list, kv{key, v})
		}
	}
	sort.Slice(list, func(i, j int) bool {
		if reverse {
			return list[i].key > list[j].key
		}
		return list[i].key < list[j].key
	})
	for _, e := range list {
		if err := fn(e.key, e.val); err != nil {
			if errors.Is(err, state.ErrStop) {
				return nil
			}
			return err
		}
	}
	return nil
}

// list reads the group's values from the stream leader with no consumer:
// the keys with one stream info request, then each key's latest message,
// several in flight (jskv.Bucket.ScanLatest). A leader read is as fresh
// as the version key the transaction read before it, so the scan sees
// every commit that read relies on; a commit landing during the scan is
// caught as any other, by View's re-check or Update's compare-and-set of
// the version keys.
func (b *bucket) list() (map[string][]byte, error) {
	vals := map[string][]byte{}
	err := b.t.s.lead.ScanLatest(b.t.ctx, b.base+"*", func(k string, e jskv.Entry) error {
		if e.Exists {
			vals[k] = e.Value
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kvstate: %s: scan %s: %w", b.t.s.cfg.Bucket, b.base, err)
	}
	return vals, nil
}

// encode makes a KV key token of s (see the package doc).
func encode(s string) string {
	if s != "" && plain(s) {
		return s
	}
	return "=" + base64.RawURLEncoding.EncodeToString([]byte(s))
}

func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func decode(tok string) (string, error) {
	enc, ok := strings.CutPrefix(tok, "=")
	if !ok {
		return tok, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", fmt.Errorf("kvstate: key token %q is not '=' + base64url: %w", tok, err)
	}
	return string(b), nil
}
