package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/internal/jskv"
)

// Defaults of MarkerConfig.
const (
	// DefaultMarkerAge is how old a delete marker must be to go.
	DefaultMarkerAge = time.Hour
	// DefaultMarkerInterval is how often MarkerPurger.Start purges.
	DefaultMarkerInterval = time.Hour
	// DefaultMarkerTimeout bounds the purge of one bucket.
	DefaultMarkerTimeout = 2 * time.Minute
)

// MarkerConfig configures a MarkerPurger.
type MarkerConfig struct {
	// NC is the mesh core's connection: it lists the buckets' keys
	// through an ordered consumer and purges their streams, which no
	// worker identity may do. Required (the mesh sets it).
	NC *nats.Conn
	// Buckets are the KV buckets whose delete markers go: the
	// catalogues' state buckets (given by the program that assembles
	// the mesh, cmd/utpmesh: the core knows no catalogue) and the
	// inbox's (the mesh adds it). A bucket that does not exist (a
	// catalogue not served, or served from its local file) is skipped.
	Buckets []string
	// OlderThan is how old a marker must be to go (default
	// DefaultMarkerAge); a younger one stays until a later run.
	OlderThan time.Duration
	// Interval between Start's runs (default DefaultMarkerInterval).
	Interval time.Duration
	// Timeout bounds the purge of one bucket (default
	// DefaultMarkerTimeout); what it did not reach goes the next run.
	Timeout time.Duration
	// Clock judges ages (default time.Now).
	Clock func() time.Time
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// MarkerReport says what one run did to one bucket.
type MarkerReport struct {
	Bucket string `json:"bucket"`
	// Missing is true when the bucket does not exist.
	Missing bool `json:"missing,omitempty"`
	// Purged counts the delete markers removed.
	Purged int `json:"purged"`
	// Err is why the run stopped early ("" when it did not).
	Err string `json:"error,omitempty"`
}

// MarkerPurger removes old delete markers from KV buckets. A KV Delete
// leaves a marker (the key with no value, ~100–250 bytes) that the bucket
// would keep forever and every later scan of the bucket reads; workers
// delete their records (and may not purge their buckets), so the core
// does, on a schedule. Create it with NewMarkerPurger; Purge runs once,
// Start every Interval until Stop. In a cluster every node runs one: two
// runs at once only repeat each other's purges.
type MarkerPurger struct {
	cfg  MarkerConfig
	js   jetstream.JetStream
	stop chan struct{}
	done chan struct{}
	once sync.Once
	mu   sync.Mutex // guards started and cancel
	// started is set by Start: Stop then waits for its loop.
	started bool
	cancel  context.CancelFunc
}

// NewMarkerPurger checks cfg and returns a MarkerPurger.
func NewMarkerPurger(cfg MarkerConfig) (*MarkerPurger, error) {
	if cfg.NC == nil {
		return nil, fmt.Errorf("%w: retention.MarkerConfig needs NC, the mesh core's connection", ErrInvalid)
	}
	for what, d := range map[string]time.Duration{"OlderThan": cfg.OlderThan, "Interval": cfg.Interval, "Timeout": cfg.Timeout} {
		if d < 0 {
			return nil, fmt.Errorf("%w: MarkerConfig.%s %v is negative: use a positive duration, or 0 for the default", ErrInvalid, what, d)
		}
	}
	if cfg.OlderThan == 0 {
		cfg.OlderThan = DefaultMarkerAge
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultMarkerInterval
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultMarkerTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	js, err := jetstream.New(cfg.NC)
	if err != nil {
		return nil, fmt.Errorf("retention: %w", err)
	}
	return &MarkerPurger{cfg: cfg, js: js, stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// Purge removes, from every bucket of the configuration, the delete
// markers older than OlderThan, each bucket within Timeout. A bucket that
// fails is logged (a warning) and reported, and the others are purged;
// one whose markers went is logged at info level.
func (p *MarkerPurger) Purge(ctx context.Context) []MarkerReport {
	out := make([]MarkerReport, 0, len(p.cfg.Buckets))
	for _, b := range p.cfg.Buckets {
		if ctx.Err() != nil {
			break
		}
		r := p.purgeBucket(ctx, b)
		switch {
		case r.Err != "":
			p.cfg.Logger.Warn("retention: purging the delete markers of a bucket failed; the next run tries again",
				"bucket", b, "purged", r.Purged, "err", r.Err)
		case r.Purged > 0:
			p.cfg.Logger.Info("retention: delete markers purged", "bucket", b, "purged", r.Purged, "older_than", p.cfg.OlderThan.String())
		}
		out = append(out, r)
	}
	return out
}

func (p *MarkerPurger) purgeBucket(ctx context.Context, bucket string) MarkerReport {
	r := MarkerReport{Bucket: bucket}
	ctx, cancel := deadline.Bound(ctx, p.cfg.Timeout)
	defer cancel()
	kv, err := p.js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		r.Missing = true
		return r
	}
	if err != nil {
		r.Err = err.Error()
		return r
	}
	b, err := jskv.Bind(p.js, kv, 0)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	r.Purged, err = b.PurgeMarkers(ctx, p.cfg.Clock().Add(-p.cfg.OlderThan))
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

// Start purges now and then every Interval, in a goroutine of its own,
// until Stop.
func (p *MarkerPurger) Start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return
	}
	p.started = true
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() {
		defer close(p.done)
		defer cancel()
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			p.Purge(ctx)
			t.Reset(p.cfg.Interval)
		}
	}()
}

// Stop ends Start's loop, canceling a run in progress, and returns once
// it has ended.
func (p *MarkerPurger) Stop() {
	p.once.Do(func() { close(p.stop) })
	p.mu.Lock()
	started, cancel := p.started, p.cancel
	p.mu.Unlock()
	if started {
		cancel()
		<-p.done
	}
}
