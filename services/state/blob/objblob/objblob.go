// Package objblob keeps blobs (package blob) in a JetStream object store
// that every worker of a service shares: R1 on a single server, R3 on a
// cluster, each write acknowledged once a majority stored it.
//
// # Layout
//
// The bucket is a standard JetStream object store (stream OBJ_<bucket>,
// what `nats object` lists and reads): a blob is its chunks (subject
// $O.<bucket>.C.<random id>, ChunkSize bytes each) and a meta message
// ($O.<bucket>.M.<base64url name>, the JSON object info: size, chunk
// count, SHA-256 digest) published after them.
//
// # Without consumers
//
// nats.go's object store reads chunks through an ordered push consumer; a
// worker identity may create no consumer (a push consumer's deliver
// subject is not checked against its creator's permissions). So this
// package reads every message with $JS.API.STREAM.MSG.GET — the meta by
// last_by_subj, the chunks by next_by_subj — which only the stream leader
// answers: a blob another worker's acknowledged Put wrote is read whole.
// A read unanswered (a leader lost, an election under way) is asked again
// until its bound ends, as the KV backends' leader reads are.
//
// # Writes
//
// Put publishes the chunks, each acknowledged, then the meta with
// Nats-Expected-Last-Subject-Sequence set to what it read: of two workers
// writing one name at once, one meta is stored, and the other worker
// purges its own chunks. Delete publishes a deleted meta (a rollup of the
// name's meta) and purges the blob's chunks.
package objblob

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/services/state/blob"
)

// DefaultChunkSize is Config.ChunkSize's default (nats.go's).
const DefaultChunkSize = 128 << 10

// Config configures a Store.
type Config struct {
	// Bucket is the object store's name ([A-Za-z0-9_-]+). Required.
	Bucket string
	// Replicas of its stream: 1, or 3 on a cluster of at least three
	// servers. Provision, and Open when it is not 0, create the bucket or
	// set its count; 0 (a worker, which manages no stream) adopts the
	// bucket as the core made it, and creates a missing one with 1 (as
	// kvstate does), which a worker identity may not: it is told the core
	// makes it.
	Replicas int
	// Description is the bucket's description (Provision).
	Description string
	// MaxBytes bounds one blob; 0 means blob.DefaultMaxBytes.
	MaxBytes int64
	// ChunkSize is the size of a chunk; 0 means DefaultChunkSize.
	ChunkSize int
	// Timeout bounds each request (a chunk's publish, a read) whatever
	// the call's context allows; 0 means deadline.Default.
	Timeout time.Duration
}

func (c Config) check() (Config, error) {
	if c.Bucket == "" {
		return c, errors.New("objblob: Config.Bucket is required")
	}
	for i := 0; i < len(c.Bucket); i++ {
		ch := c.Bucket[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_' || ch == '-') {
			return c, fmt.Errorf("objblob: bucket name %q: use letters, digits, _ and - only", c.Bucket)
		}
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return c, fmt.Errorf("objblob: %d replicas: use 1, or 3 on a cluster of at least three servers", c.Replicas)
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = blob.DefaultMaxBytes
	}
	if c.ChunkSize <= 0 {
		c.ChunkSize = DefaultChunkSize
	}
	if c.Timeout <= 0 {
		c.Timeout = deadline.Default
	}
	return c, nil
}

// Stream is the stream name of bucket.
func Stream(bucket string) string { return "OBJ_" + bucket }

// PublishSubjects are the subjects a NATS user must be allowed to publish
// to for a Store on bucket (besides its own reply inboxes): what a worker
// identity of the service needs. They create and configure no stream and
// no consumer: the mesh core provisions the bucket (Provision). The purge
// subject lets Delete drop a blob's chunks (the bucket's own data).
func PublishSubjects(bucket string) []string {
	st := Stream(bucket)
	return []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO." + st,
		"$JS.API.STREAM.MSG.GET." + st,
		"$JS.API.STREAM.PURGE." + st,
		"$O." + bucket + ".>",
	}
}

// Provision creates the bucket, or sets an existing one's replica count
// and description, with the mesh core's connection. While a cluster elects
// its leaders a request can go unanswered and succeed when sent again:
// timeouts are retried, with growing patience, for up to two minutes.
func Provision(ctx context.Context, nc *nats.Conn, cfg Config) error {
	cfg, err := cfg.check()
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ocfg := jetstream.ObjectStoreConfig{Bucket: cfg.Bucket, Description: cfg.Description,
		Storage: jetstream.FileStorage, Replicas: max(cfg.Replicas, 1)}
	err = deadline.Patiently(ctx, 2*time.Minute, nil, func(ctx context.Context) error {
		_, err := js.CreateOrUpdateObjectStore(ctx, ocfg)
		return err
	})
	if err != nil {
		hint := ""
		if cfg.Replicas > 1 {
			hint = fmt.Sprintf(" (R%d needs a NATS cluster of at least %d servers; use 1 replica on a single server)", cfg.Replicas, cfg.Replicas)
		}
		return fmt.Errorf("objblob: create object store %s (R%d): %w%s", cfg.Bucket, max(cfg.Replicas, 1), err, hint)
	}
	return nil
}

// Store is a service's blobs in a JetStream object store.
type Store struct {
	nc     *nats.Conn
	cfg    Config
	stream string
	closed atomic.Bool
}

var _ blob.Store = (*Store)(nil)

// Open binds the bucket: with cfg.Replicas 0 (a worker, which manages no
// stream) one the core made (Provision), else it provisions it first (see
// Config.Replicas).
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Store, error) {
	cfg, err := cfg.check()
	if err != nil {
		return nil, err
	}
	if cfg.Replicas > 0 {
		if err := Provision(ctx, nc, cfg); err != nil {
			return nil, err
		}
	}
	s, err := bind(ctx, nc, cfg)
	if errors.Is(err, errNoBucket) && cfg.Replicas == 0 {
		pcfg := cfg
		pcfg.Replicas = 1
		if perr := Provision(ctx, nc, pcfg); perr != nil {
			return nil, fmt.Errorf("%w (%v)", err, perr)
		}
		s, err = bind(ctx, nc, cfg)
	}
	return s, err
}

var errNoBucket = errors.New("objblob: no such object store")

func bind(ctx context.Context, nc *nats.Conn, cfg Config) (*Store, error) {
	s := &Store{nc: nc, cfg: cfg, stream: Stream(cfg.Bucket)}
	ctx, cancel := deadline.Within(ctx, cfg.Timeout)
	defer cancel()
	msg, err := deadline.Request(ctx, nc, "$JS.API.STREAM.INFO."+s.stream, nil)
	if err != nil {
		return nil, fmt.Errorf("objblob: object store %s: %w", cfg.Bucket, err)
	}
	var resp struct {
		Error *apiError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("objblob: object store %s: malformed reply: %w", cfg.Bucket, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrCode == errCodeStreamNotFound {
			return nil, fmt.Errorf("%w: object store %s does not exist: the mesh core creates it (utpmesh up of this version); workers do not", errNoBucket, cfg.Bucket)
		}
		return nil, fmt.Errorf("objblob: object store %s: %s", cfg.Bucket, resp.Error)
	}
	return s, nil
}

// JetStream API error codes this package tells apart.
const (
	errCodeStreamNotFound = 10059
	errCodeNoMessage      = 10037
	errCodeUnavailable    = 10008
	errCodeWrongLastSeq   = 10071
	errCodeWrongLastSeqC  = 10164
)

type apiError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

func (e *apiError) String() string {
	return fmt.Sprintf("%s (code %d, err_code %d)", e.Description, e.Code, e.ErrCode)
}

func (s *Store) metaSubject(name string) string {
	return "$O." + s.cfg.Bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}

func (s *Store) chunkSubject(id string) string { return "$O." + s.cfg.Bucket + ".C." + id }

func (s *Store) check(ctx context.Context, name string) error {
	if s.closed.Load() {
		return blob.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return blob.CheckName(name)
}

// info reads name's meta from the stream leader; seq is its sequence (0
// when the name has none), and info is nil when the name is absent or
// deleted.
func (s *Store) info(ctx context.Context, name string) (info *jetstream.ObjectInfo, seq uint64, err error) {
	m, err := s.msgGet(ctx, map[string]any{"last_by_subj": s.metaSubject(name)})
	if err != nil || m == nil {
		return nil, 0, err
	}
	var oi jetstream.ObjectInfo
	if err := json.Unmarshal(m.Data, &oi); err != nil {
		return nil, 0, fmt.Errorf("%w: %s: unreadable meta: %v", blob.ErrCorrupt, name, err)
	}
	if oi.Deleted {
		return nil, m.Seq, nil
	}
	return &oi, m.Seq, nil
}

// Put implements blob.Store.
func (s *Store) Put(ctx context.Context, name string, content []byte) error {
	if err := s.check(ctx, name); err != nil {
		return err
	}
	if err := blob.CheckSize(name, len(content), s.cfg.MaxBytes); err != nil {
		return err
	}
	cur, seq, err := s.info(ctx, name)
	if err != nil {
		return fmt.Errorf("objblob: put %s: %w", name, err)
	}
	if cur != nil {
		return nil
	}
	id := crand.Text()
	chunks := 0
	for off := 0; off < len(content); off += s.cfg.ChunkSize {
		end := min(off+s.cfg.ChunkSize, len(content))
		m := nats.NewMsg(s.chunkSubject(id))
		m.Data = content[off:end]
		if _, err := s.publish(ctx, m); err != nil {
			s.purge(id)
			return fmt.Errorf("objblob: put %s: chunk %d: %w", name, chunks, err)
		}
		chunks++
	}
	sum := sha256.Sum256(content)
	oi := jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(s.cfg.ChunkSize)}},
		Bucket:     s.cfg.Bucket, NUID: id, Size: uint64(len(content)), ModTime: time.Now().UTC(), Chunks: uint32(chunks),
		Digest: "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:]),
	}
	raw, err := json.Marshal(oi)
	if err != nil {
		return err
	}
	m := nats.NewMsg(s.metaSubject(name))
	m.Data = raw
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(seq, 10))
	code, err := s.publish(ctx, m)
	if code == errCodeWrongLastSeq || code == errCodeWrongLastSeqC {
		// Another worker stored the name meanwhile (or deleted it): keep
		// what it stored when it is there.
		s.purge(id)
		if cur, _, err := s.info(ctx, name); err == nil && cur != nil {
			return nil
		}
		return fmt.Errorf("objblob: put %s: another worker changed the name at the same time; put it again", name)
	}
	if err != nil {
		s.purge(id)
		return fmt.Errorf("objblob: put %s: meta: %w", name, err)
	}
	return nil
}

// Get implements blob.Store.
func (s *Store) Get(ctx context.Context, name string) ([]byte, error) {
	if err := s.check(ctx, name); err != nil {
		return nil, err
	}
	oi, _, err := s.info(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("objblob: get %s: %w", name, err)
	}
	if oi == nil {
		return nil, fmt.Errorf("%w: %s", blob.ErrNotFound, name)
	}
	if oi.Size > uint64(s.cfg.MaxBytes) {
		return nil, fmt.Errorf("%w: %s is %d bytes, over this store's limit of %d", blob.ErrTooLarge, name, oi.Size, s.cfg.MaxBytes)
	}
	out := make([]byte, 0, oi.Size)
	subj := s.chunkSubject(oi.NUID)
	for seq, n := uint64(1), uint32(0); n < oi.Chunks; n++ {
		m, err := s.msgGet(ctx, map[string]any{"seq": seq, "next_by_subj": subj})
		if err != nil {
			return nil, fmt.Errorf("objblob: get %s: chunk %d: %w", name, n, err)
		}
		if m == nil {
			return nil, fmt.Errorf("%w: %s: chunk %d of %d is missing (deleted meanwhile?)", blob.ErrCorrupt, name, n, oi.Chunks)
		}
		out = append(out, m.Data...)
		seq = m.Seq + 1
	}
	sum := sha256.Sum256(out)
	if uint64(len(out)) != oi.Size || oi.Digest != "SHA-256="+base64.URLEncoding.EncodeToString(sum[:]) {
		return nil, fmt.Errorf("%w: %s reads back as %d bytes with another digest than the %d bytes written", blob.ErrCorrupt, name, len(out), oi.Size)
	}
	return out, nil
}

// Delete implements blob.Store.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := s.check(ctx, name); err != nil {
		return err
	}
	oi, _, err := s.info(ctx, name)
	if err != nil || oi == nil {
		if err != nil {
			err = fmt.Errorf("objblob: delete %s: %w", name, err)
		}
		return err
	}
	gone := jetstream.ObjectInfo{ObjectMeta: jetstream.ObjectMeta{Name: name}, Bucket: s.cfg.Bucket, NUID: oi.NUID,
		ModTime: time.Now().UTC(), Deleted: true}
	raw, err := json.Marshal(gone)
	if err != nil {
		return err
	}
	m := nats.NewMsg(s.metaSubject(name))
	m.Data = raw
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if _, err := s.publish(ctx, m); err != nil {
		return fmt.Errorf("objblob: delete %s: %w", name, err)
	}
	if err := s.purgeCtx(ctx, oi.NUID); err != nil {
		return fmt.Errorf("objblob: delete %s: deleted, but its chunks were not purged: %w", name, err)
	}
	return nil
}

// Close implements blob.Store; the connection belongs to the caller.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// publish stores m in the stream and returns the JetStream error code of a
// refusal (0 otherwise).
func (s *Store) publish(ctx context.Context, m *nats.Msg) (int, error) {
	ctx, cancel := deadline.Within(ctx, s.cfg.Timeout)
	defer cancel()
	resp, err := deadline.RequestMsg(ctx, s.nc, m)
	if err != nil {
		return 0, err
	}
	var ack struct {
		Stream string    `json:"stream"`
		Error  *apiError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, fmt.Errorf("unreadable acknowledgement %q: %w", resp.Data, err)
	}
	if ack.Error != nil {
		return ack.Error.ErrCode, fmt.Errorf("refused: %s", ack.Error)
	}
	if ack.Stream != s.stream {
		return 0, fmt.Errorf("stored in stream %q, not %s", ack.Stream, s.stream)
	}
	return 0, nil
}

// purge drops a blob's chunks (best effort: after a failed Put).
func (s *Store) purge(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	_ = s.purgeCtx(ctx, id)
}

func (s *Store) purgeCtx(ctx context.Context, id string) error {
	req, err := json.Marshal(map[string]string{"filter": s.chunkSubject(id)})
	if err != nil {
		return err
	}
	ctx, cancel := deadline.Within(ctx, s.cfg.Timeout)
	defer cancel()
	msg, err := deadline.Request(ctx, s.nc, "$JS.API.STREAM.PURGE."+s.stream, req)
	if err != nil {
		return err
	}
	var resp struct {
		Error *apiError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("malformed purge reply: %w", err)
	}
	if resp.Error != nil {
		return fmt.Errorf("purge refused: %s", resp.Error)
	}
	return nil
}

// stored is one message read from the stream leader.
type stored struct {
	Subject string `json:"subject"`
	Seq     uint64 `json:"seq"`
	Data    []byte `json:"data"`
}

// attempt bounds one leader read request; retryPause the pause between
// two (as internal/jskv's leader reads).
const (
	attempt    = 2 * time.Second
	retryPause = 250 * time.Millisecond
)

// msgGet asks the stream leader for one message (nil when none matches),
// asking again while no leader answers, until the read's bound.
func (s *Store) msgGet(ctx context.Context, body map[string]any) (*stored, error) {
	req, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	ctx, cancel := deadline.Within(ctx, s.cfg.Timeout)
	defer cancel()
	pause := 25 * time.Millisecond
	for {
		actx, acancel := deadline.Within(ctx, attempt)
		msg, err := deadline.Request(actx, s.nc, "$JS.API.STREAM.MSG.GET."+s.stream, req)
		acancel()
		if err == nil {
			var resp struct {
				Message *stored   `json:"message"`
				Error   *apiError `json:"error"`
			}
			if err := json.Unmarshal(msg.Data, &resp); err != nil {
				return nil, fmt.Errorf("malformed reply: %w", err)
			}
			switch {
			case resp.Error == nil && resp.Message == nil:
				return nil, errors.New("reply without message")
			case resp.Error == nil:
				return resp.Message, nil
			case resp.Error.ErrCode == errCodeNoMessage:
				return nil, nil
			case resp.Error.ErrCode != errCodeUnavailable:
				return nil, fmt.Errorf("read: %s", resp.Error)
			}
			err = errors.New(resp.Error.String())
		} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("read from the stream leader of %s: %w", s.stream, err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("read from the stream leader of %s: no answer before the read's deadline (no leader: an election under way, or no quorum), last: %v: %w", s.stream, err, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, retryPause)
	}
}
