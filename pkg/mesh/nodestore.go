package mesh

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/pkg/inbox/boltinbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/inboxsvc"
	"github.com/utpmesh/utpmesh/pkg/registry/boltreg"
	"github.com/utpmesh/utpmesh/pkg/streams"
)

// The single-node state files under DataDir.
const (
	// nodeFile holds the CardStore and the inbox's entries: one bbolt
	// file written through one group committer, so a tool.result card,
	// the end of its claim and its inbox entry are one commit.
	nodeFile = "cards.db"
	// legacyInboxFile is where the inbox was kept before: Start moves its
	// entries into nodeFile once and renames it legacyInboxFile+".migrated".
	legacyInboxFile = "inbox.db"
)

// The node file's parts fit together.
var (
	_ boltstore.ResultHook = (*boltinbox.ResultHook)(nil)
	_ boltinbox.Announcer  = (*inboxsvc.Service)(nil)
)

// openFiles opens the single-node state: the streams with one replica,
// the node file (the CardStore and the inbox, whose entry of a result is
// stored in the result's transaction) and the registry's file.
func (m *Mesh) openFiles(ctx context.Context, js jetstream.JetStream) error {
	cfg, log := m.cfg, m.cfg.Logger
	var sopts []streams.Option
	if m.asyncStreams() {
		sopts = append(sopts, streams.WithAsyncPersist(log.With("component", "streams").Warn))
	}
	if err := streams.Ensure(ctx, js, cfg.ProtocolVersion, sopts...); err != nil {
		return err
	}
	path := filepath.Join(cfg.DataDir, nodeFile)
	db, err := boltfile.Open(path, boltfile.Options{Timeout: boltinbox.DefaultOpenTimeout})
	if err != nil {
		return fmt.Errorf("mesh: node file: %w", err)
	}
	ccfg := boltfile.CommitConfig{Logger: log.With("component", "cardstore"), Name: path}
	if m.metrics != nil {
		ccfg.Observer = m.metrics.CardStore()
	}
	commits := boltfile.NewCommitter(db, ccfg)
	// Stoppers run in reverse: the CardStore and the inbox stop first,
	// then the committer commits what is queued (wakeup marks, lazy
	// acks) and the file closes.
	m.push(func(context.Context) error {
		commits.Close()
		if err := db.Close(); err != nil {
			return fmt.Errorf("mesh: close %s: %w", path, err)
		}
		return nil
	})
	ib, err := boltinbox.OpenShared(db, commits)
	if err != nil {
		return err
	}
	m.push(func(context.Context) error { return ib.Close() })
	if err := m.migrateInbox(ctx, ib); err != nil {
		return err
	}
	hook, err := ib.ResultHook(cfg.ProtocolVersion, log.With("component", "inbox"))
	if err != nil {
		return err
	}
	storeOpts := []boltstore.Option{boltstore.WithLogger(log.With("component", "cardstore")), boltstore.WithResultHook(hook)}
	if cfg.MaxCardBytes > 0 {
		storeOpts = append(storeOpts, boltstore.WithMaxCardBytes(cfg.MaxCardBytes))
	}
	switch linger := cfg.DispatchLinger; {
	case linger == 0:
		storeOpts = append(storeOpts, boltstore.WithDispatchLinger(DefaultDispatchLinger))
	case linger > 0:
		storeOpts = append(storeOpts, boltstore.WithDispatchLinger(linger))
	}
	cards, err := boltstore.OpenShared(db, commits, storeOpts...)
	if err != nil {
		return err
	}
	m.push(func(context.Context) error { return cards.Close() })
	m.cards, m.boltDB = cards, db
	if m.asyncStreams() {
		n, err := replayOutbox(ctx, js, cfg.ProtocolVersion, cards)
		if err != nil {
			return err
		}
		if n > 0 {
			log.Warn("mesh: published again the commands of calls without a result that the command stream may have lost in a crash (a duplicate of one it kept is dropped or harmless)",
				"commands", n)
		}
		if m.ringSince, err = ringMarkedSince(ctx, js, cfg.ProtocolVersion); err != nil {
			return err
		}
	}
	m.inboxStore, m.inboxBoltDB, m.resultHook = ib, ib, hook
	reg, err := boltreg.Open(filepath.Join(cfg.DataDir, "registry.db"))
	if err != nil {
		return err
	}
	m.reg = reg
	m.push(func(context.Context) error { return reg.Close() })
	return nil
}

// migrateInbox moves the entries of a data directory's inbox.db (kept
// before the node file) into the node file, once.
func (m *Mesh) migrateInbox(ctx context.Context, ib *boltinbox.DB) error {
	old := filepath.Join(m.cfg.DataDir, legacyInboxFile)
	if _, err := os.Stat(old); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	n, err := ib.Migrate(ctx, old)
	if err != nil {
		return fmt.Errorf("mesh: %w", err)
	}
	m.cfg.Logger.Info("mesh: the inbox's entries moved into the node file", "from", old, "to", filepath.Join(m.cfg.DataDir, nodeFile),
		"entries", n, "renamed", old+".migrated")
	return nil
}

// CardsDB is the node file (for inspection and benchmarks): the
// CardStore's and, on a single node, the inbox's bbolt file; nil when the
// cards are not in a local file.
func (m *Mesh) CardsDB() *bolt.DB { return m.boltDB }

// InboxDB is the inbox's bbolt file (for inspection and benchmarks): on a
// single node the node file, CardsDB; nil when the inbox is replicated.
func (m *Mesh) InboxDB() *bolt.DB {
	if m.inboxBoltDB == nil {
		return nil
	}
	return m.inboxBoltDB.Bolt()
}

// workerStore is the CardStore the node's in-process worker uses: the
// node's own, and on a single node one that starts a call on the card the
// admission is committing (earlyStarts).
func (m *Mesh) workerStore() cardstore.Store {
	if bs, ok := m.cards.(*boltstore.Store); ok {
		return earlyStarts{bs}
	}
	return m.cards
}

// earlyStarts is the single node's CardStore as its in-process worker
// sees it: StartCall starts a call on the tool.call card the admission
// announced without waiting for the card's commit
// (boltstore.Store.StartCallEarly), so a quick call's card and result
// share one commit (Config.DispatchLinger). The worker dies with the
// store, so a crash cannot leave it running a call whose card was lost;
// workers in other processes start through natsstore, which waits.
type earlyStarts struct{ *boltstore.Store }

// StartCall is boltstore.Store.StartCallEarly.
func (s earlyStarts) StartCall(ctx context.Context, req cardstore.StartCallRequest) (*cardstore.StartCallResult, error) {
	return s.Store.StartCallEarly(ctx, req)
}
