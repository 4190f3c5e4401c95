package boltinbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
)

// SchemaKey is the meta key of the inbox's schema version in a file it
// shares (OpenShared); a file of its own keeps it under
// boltfile.VersionKey.
var SchemaKey = []byte("inbox_schema_version")

// migratedKey, in a shared file's meta bucket, records that a standalone
// inbox file's entries were moved in (Migrate): its value is the file's
// name and the time.
var migratedKey = []byte("inbox_migrated_from")

// sharedSchema is the inbox's layout in a file it shares: the same
// buckets (the meta bucket is the file's), its version under SchemaKey.
func sharedSchema() *boltfile.Schema {
	return &boltfile.Schema{Kind: "inbox", Version: schemaVersion, Key: SchemaKey, Buckets: allBuckets[1:]}
}

// OpenShared is Open on a file the inbox shares with the CardStore (a
// node's file, pkg/mesh): the caller opened db with boltfile.Open and
// writes every kind of the file through one committer, commits, so an
// entry can be stored in the transaction of its tool.result card
// (ResultHook) and the wakeup-sent marks and lazy acks ride along with
// card commits too. The inbox's buckets do not collide with the
// CardStore's; its version is kept under SchemaKey. Close stops the inbox without closing db or commits: the
// caller closes commits (which commits the queued marks and acks), then
// db.
func OpenShared(db *bolt.DB, commits *boltfile.Committer) (*DB, error) {
	if db == nil || commits == nil {
		return nil, fmt.Errorf("%w: boltinbox.OpenShared: a bbolt file and its committer are required", inbox.ErrInvalid)
	}
	if err := boltfile.Init(db, sharedSchema()); err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	return &DB{bolt: db, path: db.Path(), commits: commits, shared: true, lazy: map[string]time.Time{}}, nil
}

// Announcer is told about the entry a ResultHook stored, once the
// transaction holding it is durable; inboxsvc.Service rings the entry's
// wakeup. Announce must not block.
type Announcer interface {
	// Announce: e is the call's entry (created by this transaction, or
	// found: the call had one), result the tool.result card it points
	// at and data that card as stored (its canonical JSON).
	Announce(e *inbox.Entry, created bool, result *card.Card, data []byte)
}

// ResultHook stores a call's inbox entry in the transaction that stores
// its tool.result card, in a file the inbox shares with the CardStore: it
// implements cardstore/boltstore's ResultHook (pkg/mesh passes it to
// boltstore.WithResultHook). The entry is the one the worker's report
// makes (inbox.ReportOfResult builds the report; the insert is Insert's,
// with its de-duplication and stale rule). A result that makes no report
// this inbox takes (inbox.ReportOfResult's error) gets no entry here: the
// worker's report takes the ordinary way and is refused or accepted
// there. Until Attach, and after the inbox is closed, the hook stores
// nothing.
type ResultHook struct {
	db      *DB
	version string
	log     *slog.Logger
	ann     atomic.Pointer[Announcer]
}

// ResultHook returns the hook of the inbox in a shared file (OpenShared)
// for reports of protocol version version; log gets one debug record per
// result that makes no entry (nil discards).
func (d *DB) ResultHook(version string, log *slog.Logger) (*ResultHook, error) {
	if !d.shared {
		return nil, fmt.Errorf("%w: boltinbox: a result hook needs the inbox in the CardStore's file (OpenShared)", inbox.ErrInvalid)
	}
	if version == "" {
		return nil, fmt.Errorf("%w: boltinbox: ResultHook: the protocol version is required", inbox.ErrInvalid)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ResultHook{db: d, version: version, log: log}, nil
}

// Attach starts the hook: from now on every new result's entry is stored
// with the result and announced to a.
func (h *ResultHook) Attach(a Announcer) { h.ann.Store(&a) }

// ResultStored stores the entry of result in tx and returns the func
// that announces it; see boltstore.ResultHook.
func (h *ResultHook) ResultStored(tx *bolt.Tx, result, call *card.Card, data []byte) (func(), error) {
	ap := h.ann.Load()
	if ap == nil || h.db.isClosed() {
		return nil, nil
	}
	if tx.DB() != h.db.bolt {
		return nil, fmt.Errorf("inbox: result hook called in a transaction of %s, not of the inbox's file %s", tx.DB().Path(), h.db.path)
	}
	rr, err := inbox.ReportOfResult(h.version, result, call)
	if err != nil {
		h.log.Debug("inbox: result stored without an entry; the worker's report makes it", "tool_result_card_id", result.CardID, "reason", err)
		return nil, nil
	}
	e, created, err := insertTx(tx, rr.ProjectID, rr.ChannelID, &rr.Report, rr.Traceparent)
	if err != nil {
		return nil, fmt.Errorf("inbox: store the entry of result card %s: %w", result.CardID, err)
	}
	a := *ap
	return func() { a.Announce(e, created, result, data) }, nil
}

// isClosed reports whether Close has run.
func (d *DB) isClosed() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.closed
}

// Migrate moves the entries of a standalone inbox file at path (the
// inbox.db of a data directory from before the node file) into the shared
// file d: every bucket with its keys and sequences, in one transaction,
// recorded in the meta bucket; then it renames the file to
// path+".migrated". A missing file is nothing to do (0, nil). A crash
// after the commit leaves the file in place with the record: the next
// Migrate only renames it. The shared file must hold no entries yet, and
// the file must be an inbox file (ErrSchemaVersion otherwise). It returns
// how many entries moved.
func (d *DB) Migrate(ctx context.Context, path string) (int, error) {
	if !d.shared {
		return 0, fmt.Errorf("%w: boltinbox: Migrate moves a file into a shared inbox (OpenShared)", inbox.ErrInvalid)
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("inbox: migrate %s: %w", path, err)
	}
	done := false
	if err := d.view(ctx, func(tx *bolt.Tx) error {
		done = tx.Bucket(boltfile.MetaBucket).Get(migratedKey) != nil
		return nil
	}); err != nil {
		return 0, err
	}
	n := 0
	if !done {
		var err error
		if n, err = d.copyFrom(ctx, path); err != nil {
			return 0, fmt.Errorf("inbox: migrate %s into %s: %w", path, d.path, err)
		}
	}
	if err := os.Rename(path, path+".migrated"); err != nil {
		return n, fmt.Errorf("inbox: entries of %s are in %s; rename it: %w", path, d.path, err)
	}
	return n, nil
}

// copyFrom copies the inbox buckets of the file at path into d in one
// write, with the migration record.
func (d *DB) copyFrom(ctx context.Context, path string) (int, error) {
	old, err := boltfile.Open(path, boltfile.Options{Timeout: time.Second, Schema: &boltfile.Schema{
		Kind: "inbox", Version: schemaVersion, Buckets: allBuckets,
	}})
	if err != nil {
		return 0, err
	}
	defer old.Close()
	n := 0
	err = old.View(func(otx *bolt.Tx) error {
		return d.update(ctx, func(tx *bolt.Tx) error {
			n = 0
			if k, _ := tx.Bucket(bucketEntries).Cursor().First(); k != nil {
				return fmt.Errorf("%s holds inbox entries already; if %s's entries are among them, move %s away and start again", d.path, path, path)
			}
			for _, name := range allBuckets[1:] {
				src, dst := otx.Bucket(name), tx.Bucket(name)
				if err := src.ForEach(func(k, v []byte) error { return dst.Put(k, v) }); err != nil {
					return fmt.Errorf("copy bucket %q: %w", name, err)
				}
				if err := dst.SetSequence(src.Sequence()); err != nil {
					return fmt.Errorf("copy bucket %q: %w", name, err)
				}
			}
			n = otx.Bucket(bucketEntries).Stats().KeyN
			rec := fmt.Sprintf("%s %s", path, time.Now().UTC().Format(time.RFC3339))
			return tx.Bucket(boltfile.MetaBucket).Put(migratedKey, []byte(rec))
		})
	})
	return n, err
}
