// Package ratelimit enforces the ATP per-client rate limits across every
// worker process of the service: the counters live in a JetStream
// key-value bucket (default "utpmesh_atp_ratelimit"), not in the process.
//
// Why a KV bucket and not CardStore claims: a limit is a counter, and the
// bucket's compare-and-set (Create, Update with the last revision) makes
// "increment if below the limit" atomic among any number of processes;
// claims are leases for mutual exclusion and would need one claim per
// permitted call. The bucket's TTL drops old windows by itself.
//
// Limits are fixed windows per client (the calling agent_id) and project:
// CallsPerMinute counts every ATP call, HEMPerHour atp_invoke_hem,
// NotificationsPerHour atp_notify_traveller. A call over a limit is not
// counted.
package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultBucket is the KV bucket of the counters.
const DefaultBucket = "utpmesh_atp_ratelimit"

// ErrLimited: the call is over a limit; the error is a *Limited.
var ErrLimited = errors.New("ratelimit: limited")

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
	var taken []string
	for _, c := range cs {
		if c.max < 0 {
			continue
		}
		start := now.Truncate(c.window)
		key := l.key(project, client, c.name, start)
		ok, err := l.incr(ctx, key, c.max)
		if err != nil || !ok {
			for _, k := range taken {
				l.decr(ctx, k)
			}
			if err != nil {
				return err
			}
			retry := start.Add(c.window).Sub(now)
			return &Limited{Limit: c.name, Max: c.max, Window: c.label, RetryAfter: retry, RetryAfterSeconds: int((retry + time.Second - 1) / time.Second)}
		}
		taken = append(taken, key)
	}
	return nil
}

// key names a counter; project and client are hashed so any id fits the
// KV key alphabet.
func (l *Limiter) key(project, client, name string, start time.Time) string {
	sum := sha256.Sum256([]byte(project + "\x00" + client))
	return fmt.Sprintf("%s.%s.%d", hex.EncodeToString(sum[:12]), name, start.Unix())
}

// incr adds one to key unless it has reached max.
func (l *Limiter) incr(ctx context.Context, key string, max int) (bool, error) {
	for attempt := 0; attempt < 100; attempt++ {
		e, err := l.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if max < 1 {
				return false, nil
			}
			if _, err := l.kv.Create(ctx, key, []byte("1")); errors.Is(err, jetstream.ErrKeyExists) {
				continue
			} else if err != nil {
				return false, fmt.Errorf("ratelimit: %w", err)
			}
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("ratelimit: %w", err)
		}
		n, _ := strconv.Atoi(string(e.Value()))
		if n >= max {
			return false, nil
		}
		if _, err := l.kv.Update(ctx, key, []byte(strconv.Itoa(n+1)), e.Revision()); errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			continue
		} else if err != nil {
			return false, fmt.Errorf("ratelimit: %w", err)
		}
		return true, nil
	}
	return false, fmt.Errorf("ratelimit: counter %s: too much contention", key)
}

// decr takes back one count (a call refused by a later limit).
func (l *Limiter) decr(ctx context.Context, key string) {
	for attempt := 0; attempt < 100; attempt++ {
		e, err := l.kv.Get(ctx, key)
		if err != nil {
			return
		}
		n, _ := strconv.Atoi(string(e.Value()))
		if n <= 0 {
			return
		}
		if _, err := l.kv.Update(ctx, key, []byte(strconv.Itoa(n-1)), e.Revision()); err == nil {
			return
		}
	}
}
