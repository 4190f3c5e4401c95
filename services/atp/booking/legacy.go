package booking

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/services/state"
)

// The ATP service's other buckets in the state engine, per project: its
// HEM tasks (package hem), notification records and activity registry
// (package tools). They are named here so that ImportLegacy can fill them.
const (
	BucketHEMTasks      = "hem_tasks"
	BucketNotifications = "notifications"
	BucketActivities    = "activities"
)

// ImportedSuffix is appended to an ATP bookings file (atp.db) once
// ImportLegacy has copied it into the state engine.
const ImportedSuffix = ".imported"

// Imported counts what ImportLegacy copied; records already in the state
// (a file imported before, or an id another worker created) are left as
// they are and counted in Skipped.
type Imported struct {
	Bookings, Events, HEMTasks, Notifications, Activities, Skipped int
}

// legacyTop maps the top-level buckets of the bookings file written
// before the state engine (atp.db, "atp bookings" schema 1) to the
// engine's buckets: "p:<project>" holds a bucket per booking (its
// "object" and its "events" keyed by 8-byte sequence numbers), "h:",
// "n:" and "a:" the HEM tasks, notification records and activities.
var legacyTop = map[string]string{"h:": BucketHEMTasks, "n:": BucketNotifications, "a:": BucketActivities}

// ImportLegacy copies the bookings file at path, written by the ATP
// service before it kept its state in the engine, into dst, then renames
// the file to path+ImportedSuffix so that it is imported once. A missing
// file imports nothing. A record that dst already holds is kept (the copy
// is skipped), so an import cut short by a crash is simply run again.
func ImportLegacy(ctx context.Context, path string, dst state.Store) (Imported, error) {
	var n Imported
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return n, nil
	}
	db, err := boltfile.Open(path, boltfile.Options{Timeout: 5 * time.Second, Schema: &boltfile.Schema{Kind: "atp bookings", Version: "1", Adopt: true}})
	if err != nil {
		return n, fmt.Errorf("booking: import %s: %w (is an ATP worker of an older version still running on this data directory? stop it first)", path, err)
	}
	err = db.View(func(btx *bolt.Tx) error {
		return btx.ForEach(func(name []byte, top *bolt.Bucket) error {
			prefix, project, ok := strings.Cut(string(name), ":")
			if !ok || project == "" {
				return nil // the meta bucket
			}
			if prefix == "p" {
				return importBookings(ctx, dst, project, top, &n)
			}
			if bucket, ok := legacyTop[prefix+":"]; ok {
				return importFlat(ctx, dst, project, bucket, top, &n)
			}
			return nil
		})
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("booking: import %s: %w", path, err)
	}
	if err := os.Rename(path, path+ImportedSuffix); err != nil {
		return n, fmt.Errorf("booking: imported %s, but could not rename it (it will be imported again, skipping what is there): %w", path, err)
	}
	return n, nil
}

// importBookings copies each booking with its log in one transaction.
func importBookings(ctx context.Context, dst state.Store, project string, top *bolt.Bucket, n *Imported) error {
	return top.ForEachBucket(func(id []byte) error {
		bb := top.Bucket(id)
		object := bb.Get([]byte("object"))
		if object == nil {
			return fmt.Errorf("booking %s of project %s has no object", id, project)
		}
		type ev struct {
			key string
			val []byte
		}
		var events []ev
		if eb := bb.Bucket([]byte("events")); eb != nil {
			if err := eb.ForEach(func(k, v []byte) error {
				if len(k) != 8 {
					return fmt.Errorf("booking %s of project %s: event key %x is not a sequence number", id, project, k)
				}
				events = append(events, ev{EventKey(binary.BigEndian.Uint64(k)), v})
				return nil
			}); err != nil {
				return err
			}
		}
		skipped := false
		err := dst.Update(ctx, func(tx state.Tx) error {
			_, found, err := tx.Bucket(project, BucketBookings).Get(string(id))
			if skipped = found; err != nil || found {
				return err
			}
			for _, e := range events {
				if err := tx.Bucket(project, EventsBucket(string(id))).Put(e.key, e.val); err != nil {
					return err
				}
			}
			return tx.Bucket(project, BucketBookings).Put(string(id), object)
		})
		if err != nil {
			return err
		}
		if skipped {
			n.Skipped++
		} else {
			n.Bookings++
			n.Events += len(events)
		}
		return nil
	})
}

// importFlat copies a bucket of keys and values, 100 keys a transaction.
func importFlat(ctx context.Context, dst state.Store, project, bucket string, top *bolt.Bucket, n *Imported) error {
	type kv struct{ k, v []byte }
	var batch []kv
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		var added, skipped int
		err := dst.Update(ctx, func(tx state.Tx) error {
			added, skipped = 0, 0
			b := tx.Bucket(project, bucket)
			for _, e := range batch {
				_, found, err := b.Get(string(e.k))
				if err != nil {
					return err
				}
				if found {
					skipped++
					continue
				}
				if err := b.Put(string(e.k), e.v); err != nil {
					return err
				}
				added++
			}
			return nil
		})
		if err != nil {
			return err
		}
		n.Skipped += skipped
		switch bucket {
		case BucketHEMTasks:
			n.HEMTasks += added
		case BucketNotifications:
			n.Notifications += added
		case BucketActivities:
			n.Activities += added
		}
		batch = batch[:0]
		return nil
	}
	err := top.ForEach(func(k, v []byte) error {
		if v == nil {
			return nil // a nested bucket: none in these
		}
		batch = append(batch, kv{k, v})
		if len(batch) == 100 {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}
