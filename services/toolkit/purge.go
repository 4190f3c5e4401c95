package toolkit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/utpmesh/utpmesh/services/state"
)

// Call records do not live forever: a catalogue purges them (Purge) on a
// schedule (PurgeLoop).
//
// A call record answers a repeat of its call (a redelivered command, a
// retry after an unknown commit outcome) only while the call has no
// result card: once its result card is stored, the worker runtime
// re-reports that card to every repeat and never runs the handler again.
// Every delivery of a call's command happens within the command stream's
// max age (streams.CommandMaxAge, 24 h), and turn retention
// (pkg/retention) never removes a turn whose call has no result. So a
// record older than RecordMaxAge answers nothing a result card would not.
const (
	// RecordMaxAge is how long a catalogue keeps a call record (and
	// ATLAS a pending confirmation) after it was stored: well past the
	// command stream's 24 h and a confirmation's PendingTTL.
	RecordMaxAge = 7 * 24 * time.Hour
	// PurgeEvery is how often a catalogue's workers purge by default, so
	// a record goes between RecordMaxAge and RecordMaxAge + PurgeEvery
	// after it was stored.
	PurgeEvery = time.Hour
	// purgeBatch bounds the keys one purge transaction deletes (one
	// atomic batch of the replicated state).
	purgeBatch = 64
)

// Aged is a bucket of per-call records that Purge removes once they are
// old.
type Aged struct {
	// Bucket is the bucket's name in every project.
	Bucket string
	// Time returns when a record was stored; zero when it does not say
	// (written by an earlier version).
	Time func(value []byte) (time.Time, error)
	// Stamp returns value carrying at as its time, for a record whose
	// Time is zero; nil keeps such records as they are.
	Stamp func(value []byte, at time.Time) ([]byte, error)
}

// CallRecords is the Aged of a bucket of CallRecords (PutCall): a record
// without At is stamped with the time of the purge that finds it, so it
// goes RecordMaxAge later.
func CallRecords(bucket string) Aged {
	return Aged{Bucket: bucket,
		Time: func(v []byte) (time.Time, error) {
			var r struct {
				At time.Time `json:"at"`
			}
			if err := json.Unmarshal(v, &r); err != nil {
				return time.Time{}, fmt.Errorf("%w: %w", ErrRecord, err)
			}
			return r.At, nil
		},
		Stamp: func(v []byte, at time.Time) ([]byte, error) {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(v, &m); err != nil || m == nil {
				return nil, fmt.Errorf("%w: not a JSON object (%v)", ErrRecord, err)
			}
			raw, err := json.Marshal(at.UTC())
			if err != nil {
				return nil, err
			}
			m["at"] = raw
			return json.Marshal(m)
		}}
}

// Purged is what a Purge did.
type Purged struct {
	// Deleted records were older than the max age.
	Deleted int
	// Stamped records had no time and were given the purge's.
	Stamped int
	// Unreadable records could not be read and were kept; Purge's error
	// names the first.
	Unreadable int
}

// Purge deletes, in every project of st, the records of each bucket
// stored before now - maxAge, and stamps records without a time with now.
// It reads each project's records in one read transaction and deletes at
// most purgeBatch of them per write transaction, reading each again
// first, so that it is safe to run in several workers at once. A record
// it cannot read is kept and counted, and a project it cannot read or
// write is left for the next run: the others are purged all the same,
// and the error names the first such record or project.
func Purge(ctx context.Context, st state.Store, now time.Time, maxAge time.Duration, buckets ...Aged) (Purged, error) {
	var out Purged
	var bad error
	var projects []string
	if err := st.View(ctx, func(tx state.Tx) error {
		var err error
		projects, err = tx.Projects()
		return err
	}); err != nil {
		return out, fmt.Errorf("toolkit: purge: list projects: %w", err)
	}
	cutoff := now.Add(-maxAge)
	for _, p := range projects {
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("toolkit: purge: %w", err)
		}
		for _, a := range buckets {
			var keys []string
			err := st.View(ctx, func(tx state.Tx) error {
				keys = keys[:0] // the closure may run again
				return tx.Bucket(p, a.Bucket).Scan("", false, func(k string, v []byte) error {
					at, err := a.Time(v)
					if err != nil || (at.IsZero() && a.Stamp != nil) || (!at.IsZero() && at.Before(cutoff)) {
						keys = append(keys, k)
					}
					return nil
				})
			})
			if err != nil {
				// A busy or unreachable project: the others are purged
				// all the same, and the error says which was not.
				if bad == nil {
					bad = fmt.Errorf("toolkit: purge: read project %s's %s: %w", p, a.Bucket, err)
				}
				continue
			}
			for len(keys) > 0 {
				n := min(len(keys), purgeBatch)
				var did Purged
				var firstBad error
				err := st.Update(ctx, func(tx state.Tx) error {
					did, firstBad = Purged{}, nil
					b := tx.Bucket(p, a.Bucket)
					for _, k := range keys[:n] {
						v, found, err := b.Get(k)
						if err != nil {
							return err
						}
						if !found {
							continue
						}
						at, err := a.Time(v)
						switch {
						case err != nil:
							did.Unreadable++
							if firstBad == nil {
								firstBad = fmt.Errorf("toolkit: purge: project %s, bucket %s, key %q: %w", p, a.Bucket, k, err)
							}
						case at.IsZero() && a.Stamp != nil:
							sv, err := a.Stamp(v, now)
							if err != nil {
								did.Unreadable++
								if firstBad == nil {
									firstBad = fmt.Errorf("toolkit: purge: project %s, bucket %s, key %q: %w", p, a.Bucket, k, err)
								}
								continue
							}
							if err := b.Put(k, sv); err != nil {
								return err
							}
							did.Stamped++
						case !at.IsZero() && at.Before(cutoff):
							if err := b.Delete(k); err != nil {
								return err
							}
							did.Deleted++
						}
					}
					return nil
				})
				if err != nil {
					if bad == nil {
						bad = fmt.Errorf("toolkit: purge: project %s's %s: %w", p, a.Bucket, err)
					}
					break
				}
				out.Deleted += did.Deleted
				out.Stamped += did.Stamped
				out.Unreadable += did.Unreadable
				if bad == nil {
					bad = firstBad
				}
				keys = keys[n:]
			}
		}
	}
	return out, bad
}

// PurgeLoop runs purge every every (PurgeEvery when 0; never when
// negative) until ctx ends or stop is closed, logging what each run did
// (a deletion at info, an error as a warning; the next run tries again).
// what names the records in the log ("atp call records").
func PurgeLoop(ctx context.Context, stop <-chan struct{}, every time.Duration, log *slog.Logger, what string, purge func(ctx context.Context) (Purged, error)) {
	if every < 0 {
		return
	}
	if every == 0 {
		every = PurgeEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-t.C:
		}
		p, err := purge(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("purge of "+what+" failed; the next run tries again", "err", err, "deleted", p.Deleted, "every", every)
		case p.Deleted > 0 || p.Stamped > 0:
			log.Info("purged "+what, "deleted", p.Deleted, "stamped", p.Stamped, "max_age", RecordMaxAge)
		}
	}
}
