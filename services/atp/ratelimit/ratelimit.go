// Package ratelimit enforces the ATP per-client rate limits across every
// worker process of the service: the counters live in a JetStream
// key-value bucket (default "utpmesh_atp_ratelimit"), not in the process.
//
// Limits are sliding windows per client (the calling agent_id) and
// project: CallsPerMinute counts every ATP call, HEMPerHour
// atp_invoke_hem, NotificationsPerHour atp_notify_traveller. A call is
// allowed when fewer than the limit's maximum calls were allowed in the
// window that ends now (the last minute or hour), so no interval of a
// window's length ever holds more than the maximum, wherever it starts (a
// fixed window let 2×max calls through around its boundary). A call over
// a limit is not counted.
//
// Each counter is one KV key, (project, client, limit), whose value is
// the times of the calls allowed in the current window (at most max of
// them: 100 for the public figures, 800 bytes). A limiter reads the key,
// drops the times that left the window, and writes the list with one more
// time under compare-and-set on the revision it read (Create for a new
// key): two processes that race on one key cannot both take its last
// slot, the loser reads again. Why a KV bucket and not CardStore claims:
// a limit is shared state with a read-modify-write, which per-key
// compare-and-set makes atomic among any number of processes; claims are
// leases for mutual exclusion. The bucket's TTL drops idle clients' keys.
package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultBucket is the KV bucket of the counters.
const DefaultBucket = "utpmesh_atp_ratelimit"

// Errors of Allow.
var (
	// ErrLimited: the call is over a limit; the error is a *Limited.
	ErrLimited = errors.New("ratelimit: limited")
	// ErrContention: a counter changed under every one of the limiter's
	// compare-and-set attempts; the call may be retried.
	ErrContention = errors.New("ratelimit: too much contention on a counter")
)

// Limits are one project's limits; 0 takes the default (the public ATP
// figures), a negative value turns the limit off.
type Limits struct {
	CallsPerMinute       int `json:"calls_per_minute"`
	HEMPerHour           int `json:"hem_per_hour"`
	NotificationsPerHour int `json:"notifications_per_hour"`
}

// Defaults are the public specification's figures.
var Defaults = Limits{CallsPerMinute: 60, HEMPerHour: 10, NotificationsPerHour: 100}

func (l Limits) norm() Limits {
	if l.CallsPerMinute == 0 {
		l.CallsPerMinute = Defaults.CallsPerMinute
	}
	if l.HEMPerHour == 0 {
		l.HEMPerHour = Defaults.HEMPerHour
	}
	if l.NotificationsPerHour == 0 {
		l.NotificationsPerHour = Defaults.NotificationsPerHour
	}
	return l
}

// Limited says which limit a call hit and when to retry.
type Limited struct {
	Limit      string        `json:"limit"`
	Max        int           `json:"max"`
	Window     string        `json:"window"`
	RetryAfter time.Duration `json:"-"`
	// RetryAfterSeconds is RetryAfter rounded up.
	RetryAfterSeconds int `json:"retry_after_seconds"`
}

func (e *Limited) Error() string {
	return fmt.Sprintf("rate limit %s: %d per %s reached; retry after %ds", e.Limit, e.Max, e.Window, e.RetryAfterSeconds)
}

// Is makes errors.Is(err, ErrLimited) true.
func (e *Limited) Is(target error) bool { return target == ErrLimited }

// Limiter checks and counts calls.
type Limiter struct {
	kv     jetstream.KeyValue
	now    func() time.Time
	limits func(project string) Limits
}

// Config configures New.
type Config struct {
	// Bucket; default DefaultBucket.
	Bucket string
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Limits returns a project's limits; nil: Defaults everywhere.
	Limits func(project string) Limits
}

// New opens the counters bucket, creating it when missing.
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Limiter, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Limits == nil {
		cfg.Limits = func(string) Limits { return Defaults }
	}
	// Bind the bucket the core made (Provision); create it only when
	// missing (a mesh without identities, tests).
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, bucketConfig(cfg.Bucket))
	}
	if err != nil {
		return nil, fmt.Errorf("ratelimit: KV bucket %s: %w", cfg.Bucket, err)
	}
	return &Limiter{kv: kv, now: cfg.Now, limits: cfg.Limits}, nil
}

// Kind of call for Allow.
const (
	KindCall         = "call"
	KindHEM          = "hem"
	KindNotification = "notification"
)

type counter struct {
	name   string
	max    int
	window time.Duration
	label  string
}

// Allow counts one call of client in project; kind adds the HEM or
// notification limit to the per-minute one. Over a limit it returns a
// *Limited (errors.Is ErrLimited) and counts nothing.
func (l *Limiter) Allow(ctx context.Context, project, client, kind string) error {
	lim := l.limits(project).norm()
	cs := []counter{{"calls_per_minute", lim.CallsPerMinute, time.Minute, "minute"}}
	switch kind {
	case KindHEM:
		cs = append(cs, counter{"hem_per_hour", lim.HEMPerHour, time.Hour, "hour"})
	case KindNotification:
		cs = append(cs, counter{"notifications_per_hour", lim.NotificationsPerHour, time.Hour, "hour"})
	}
	now := l.now()
	type took struct {
		key    string
		window time.Duration
	}
	var taken []took
	for _, c := range cs {
		if c.max < 0 {
			continue
		}
		key := l.key(project, client, c.name)
		retry, err := l.take(ctx, key, c.max, c.window, now)
		if err != nil || retry > 0 {
			for _, t := range taken {
				l.giveBack(ctx, t.key, t.window, now)
			}
			if err != nil {
				return err
			}
			return &Limited{Limit: c.name, Max: c.max, Window: c.label, RetryAfter: retry, RetryAfterSeconds: int((retry + time.Second - 1) / time.Second)}
		}
		taken = append(taken, took{key, c.window})
	}
	return nil
}

// key names a counter; project and client are hashed so any id fits the
// KV key alphabet.
func (l *Limiter) key(project, client, name string) string {
	sum := sha256.Sum256([]byte(project + "\x00" + client))
	return hex.EncodeToString(sum[:12]) + "." + name
}

// maxAttempts bounds the compare-and-set retries of one key.
const maxAttempts = 100

// take records a call at now on key unless max calls were recorded in the
// window (now-window, now]; then it returns how long until the oldest of
// them leaves the window (> 0) and records nothing.
func (l *Limiter) take(ctx context.Context, key string, max int, window time.Duration, now time.Time) (time.Duration, error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		times, rev, err := l.read(ctx, key, window, now)
		if err != nil {
			return 0, err
		}
		if len(times) >= max {
			if max < 1 {
				return window, nil
			}
			// The oldest call that must leave for this one to fit.
			return time.Duration(times[len(times)-max] + int64(window) - now.UnixNano()), nil
		}
		times = append(times, now.UnixNano())
		ok, err := l.write(ctx, key, times, rev)
		if err != nil {
			return 0, err
		}
		if ok {
			return 0, nil
		}
	}
	return 0, fmt.Errorf("ratelimit: counter %s: %w", key, ErrContention)
}

// giveBack removes one call recorded at now from key (a call a later
// limit refused).
func (l *Limiter) giveBack(ctx context.Context, key string, window time.Duration, now time.Time) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		times, rev, err := l.read(ctx, key, window, now)
		if err != nil {
			return
		}
		i := slices.Index(times, now.UnixNano())
		if i < 0 {
			return
		}
		if ok, err := l.write(ctx, key, slices.Delete(times, i, i+1), rev); ok || err != nil {
			return
		}
	}
}

// read returns the call times on key that are still in the window ending
// at now, oldest first, and the key's revision (0: no key).
func (l *Limiter) read(ctx context.Context, key string, window time.Duration, now time.Time) ([]int64, uint64, error) {
	e, err := l.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("ratelimit: read %s: %w", key, err)
	}
	v := e.Value()
	from := now.Add(-window).UnixNano()
	times := make([]int64, 0, len(v)/8)
	for ; len(v) >= 8; v = v[8:] {
		if t := int64(binary.BigEndian.Uint64(v)); t > from {
			times = append(times, t)
		}
	}
	slices.Sort(times)
	return times, e.Revision(), nil
}

// write stores times on key if its revision is still rev (0: the key must
// not exist); ok is false when another process wrote first.
func (l *Limiter) write(ctx context.Context, key string, times []int64, rev uint64) (bool, error) {
	v := make([]byte, 0, 8*len(times))
	for _, t := range times {
		v = binary.BigEndian.AppendUint64(v, uint64(t))
	}
	var err error
	if rev == 0 {
		_, err = l.kv.Create(ctx, key, v)
	} else {
		_, err = l.kv.Update(ctx, key, v, rev)
	}
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return false, nil
	default:
		return false, fmt.Errorf("ratelimit: write %s: %w", key, err)
	}
}
