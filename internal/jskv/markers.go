package jskv

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// PurgeMarkers removes the delete and purge markers that a KV Delete (or
// Purge) left on the bucket's keys before the time before, and returns
// how many it removed. It lists the latest message of every key, headers
// only, through one ordered consumer (so it needs an identity that may
// create consumers and purge the stream: the mesh core), then purges each
// old marker's key up to and including the marker's sequence only: a
// value stored on the key since the listing (or that a replica's lagging
// listing did not show) is kept, so a purge never loses a write. Markers
// younger than before stay (a reader that lists the bucket may still
// expect them). ctx bounds the whole run; one that ends part-way leaves
// the rest for the next run.
func (b *Bucket) PurgeMarkers(ctx context.Context, before time.Time) (int, error) {
	w, err := b.KV.WatchAll(ctx, jetstream.MetaOnly())
	if err != nil {
		return 0, fmt.Errorf("jskv: list the keys of %s: %w", b.KV.Bucket(), err)
	}
	type marker struct {
		key string
		seq uint64
	}
	var old []marker
	func() {
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				err = ctx.Err()
				return
			case e, ok := <-w.Updates():
				if !ok {
					err = fmt.Errorf("watcher closed before listing every key")
					return
				}
				if e == nil { // every key listed
					return
				}
				if op := e.Operation(); (op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge) && e.Created().Before(before) {
					old = append(old, marker{e.Key(), e.Revision()})
				}
			}
		}
	}()
	if err != nil {
		return 0, fmt.Errorf("jskv: list the keys of %s: %w", b.KV.Bucket(), err)
	}
	n := 0
	for _, m := range old {
		if err := b.purge(ctx, m.key, m.seq+1); err != nil {
			return n, fmt.Errorf("jskv: purge the delete marker of %s in %s: %w", m.key, b.KV.Bucket(), err)
		}
		n++
	}
	return n, nil
}
