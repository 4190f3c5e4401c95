package natsauthz

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/authz"
)

// Defaults of BatchConfig.
const (
	// DefaultBatchInterval is how long a decision record waits for others
	// of its subject before its message is published.
	DefaultBatchInterval = 250 * time.Millisecond
	// DefaultBatchBytes is the body size at which a subject's message is
	// published without waiting for the interval.
	DefaultBatchBytes = 64 << 10
)

// closeFlushTimeout bounds Close's flush when its ctx has no deadline.
const closeFlushTimeout = 5 * time.Second

// BatchConfig configures a Batcher.
type BatchConfig struct {
	// Interval is the longest a record waits before it is published;
	// 0 means DefaultBatchInterval.
	Interval time.Duration
	// MaxBytes publishes a subject's message as soon as its body reaches
	// it, and every pending message once all of them together reach four
	// times it; 0 means DefaultBatchBytes. It must stay below the
	// server's max_payload.
	MaxBytes int
	// Logger gets a warning for every message that could not be
	// published; nil means slog.Default().
	Logger *slog.Logger
}

// Batcher publishes audit records with core NATS like Publisher, grouping
// the records of one subject (version, project and channel) that arrive
// within Interval into one message, one JSON object per line
// (authz.ParseAuditRecords reads it). The event stream stores, and with
// its sync-always file store fsyncs, every message on an evt subject: one
// message per Interval instead of one per call takes the gate's record
// off the disk of a busy node. A record is published at most Interval
// after its decision; a process that dies before that loses it (a core
// publish is lost the same way when the connection is down; the
// decision of an admitted call is also in its tool.call card's
// metadata). Close publishes what is pending. Safe for concurrent use.
type Batcher struct {
	nc  *nats.Conn
	cfg BatchConfig

	mu      sync.Mutex
	pending map[string][]byte // subject -> NDJSON body
	order   []string          // subjects in the order of their first pending record
	total   int               // bytes in pending
	timer   *time.Timer       // publishes pending after Interval; nil when unarmed
	closed  bool
}

var _ authz.Auditor = (*Batcher)(nil)

// NewBatcher returns a Batcher publishing on nc. Close it before nc.
func NewBatcher(nc *nats.Conn, cfg BatchConfig) *Batcher {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultBatchInterval
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultBatchBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Batcher{nc: nc, cfg: cfg, pending: make(map[string][]byte)}
}

// Audit implements authz.Auditor: it queues rec for its subject's next
// message (after Close, it publishes rec at once).
func (b *Batcher) Audit(_ context.Context, ver string, rec *authz.AuditRecord) {
	subj, line, err := auditMessage(ver, rec)
	if err != nil {
		warnUnpublished(b.cfg.Logger, rec, err)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		b.publish(subj, line, 1)
		return
	}
	body, ok := b.pending[subj]
	if !ok {
		b.order = append(b.order, subj)
	} else {
		body = append(body, '\n')
		b.total++
	}
	b.pending[subj] = append(body, line...)
	b.total += len(line)
	switch {
	case len(b.pending[subj]) >= b.cfg.MaxBytes || b.total >= 4*b.cfg.MaxBytes:
		b.flushLocked()
	case b.timer == nil:
		b.timer = time.AfterFunc(b.cfg.Interval, b.flush)
	}
}

// Close publishes every pending record and flushes the connection's
// buffer to the server (bounded by ctx, or 5 s without a deadline). Later records are published one
// message each. Close is idempotent.
func (b *Batcher) Close(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	b.flushLocked()
	b.mu.Unlock()
	if b.nc.IsClosed() {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, closeFlushTimeout)
		defer cancel()
	}
	return b.nc.FlushWithContext(ctx)
}

// flush publishes what is pending (the timer's function).
func (b *Batcher) flush() {
	b.mu.Lock()
	b.flushLocked()
	b.mu.Unlock()
}

// flushLocked publishes every pending subject's message, in the order of
// their first records; b.mu is held. nc.Publish only appends to the
// connection's buffer, and publishing under the lock keeps each subject's
// messages in the order of their records.
func (b *Batcher) flushLocked() {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	for _, subj := range b.order {
		body := b.pending[subj]
		b.publish(subj, body, 1+bytes.Count(body, newline))
		delete(b.pending, subj)
	}
	b.order = b.order[:0]
	b.total = 0
}

// publish sends one message of n records, logging a failure.
func (b *Batcher) publish(subj string, body []byte, n int) {
	if err := b.nc.Publish(subj, body); err != nil {
		b.cfg.Logger.Warn("authz audit records not published", "err", err, "subject", subj, "records", n)
	}
}

// newline separates the records of a message.
var newline = []byte{'\n'}
