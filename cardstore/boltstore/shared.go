package boltstore

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// storeSchema is the store's layout for boltfile: its version under
// boltfile.VersionKey, so a file the store has always had (cards.db) is
// the same file when other kinds join it.
func storeSchema(log *slog.Logger) *boltfile.Schema {
	upgrades := map[string]func(*bolt.Tx) error{schemaVersion1: upgradeV1, schemaVersion2: upgradeV2, schemaVersion3: upgradeV3}
	for from, up := range upgrades {
		upgrades[from] = func(tx *bolt.Tx) error {
			// An upgrade reads and rewrites every turn record in one
			// transaction: say so before a long silence at start-up.
			start := time.Now()
			log.Info("boltstore: upgrading the data file's layout; this takes time in proportion to its turn records",
				"path", tx.DB().Path(), "from_schema", from, "to_schema", schemaVersion)
			err := up(tx)
			if err == nil {
				log.Info("boltstore: data file upgraded", "path", tx.DB().Path(), "to_schema", schemaVersion, "took", time.Since(start))
			}
			return err
		}
	}
	return &boltfile.Schema{Kind: "boltstore", Version: schemaVersion, Buckets: allBuckets, Upgrades: upgrades}
}

// OpenShared is Open on a file that holds other kinds too (a node's file:
// the CardStore and the inbox, pkg/mesh), opened by the caller with
// boltfile.Open and written through one committer, commits, so a write of
// the store and one of its neighbours share transactions and fsyncs. It
// checks (writes, upgrades) the store's schema in db, whose version stays
// under boltfile.VersionKey (the other kinds keep theirs under keys of
// their own), so a cards.db from before is a valid shared file. The
// caller owns db and commits: Close stops the store without closing them;
// the caller closes commits, then db, after every user of the file has
// stopped. Options that configure the file or its committer
// (WithCommitObserver, WithGroupCommit(false), WithOpenTimeout) are the
// committer's and the opener's business here: they are refused with
// cardstore.ErrInvalid.
func OpenShared(db *bolt.DB, commits *boltfile.Committer, opts ...Option) (*Store, error) {
	if db == nil || commits == nil {
		return nil, fmt.Errorf("%w: boltstore.OpenShared: a bbolt file and its committer are required", cardstore.ErrInvalid)
	}
	cfg, err := configure("boltstore.OpenShared", opts)
	if err != nil {
		return nil, err
	}
	if cfg.observer != nil || !cfg.groupCommit || cfg.openTimeout != defaultOpenTimeout {
		return nil, fmt.Errorf("%w: boltstore.OpenShared: WithCommitObserver, WithGroupCommit and WithOpenTimeout configure the file and its committer, which the caller opened: set them there (boltfile.CommitConfig, boltfile.Options)", cardstore.ErrInvalid)
	}
	if err := boltfile.Init(db, storeSchema(cfg.logger)); err != nil {
		return nil, fmt.Errorf("boltstore: %w", err)
	}
	s := &Store{db: db, cfg: cfg, path: db.Path(), commits: commits, shared: true, mem: newClaimTable()}
	if err := s.boot(); err != nil {
		return nil, err
	}
	return s, nil
}

// ResultHook lets a neighbour in the store's file write in the transaction
// that stores a tool.result card: the inbox of a node stores the call's
// entry there, so the result, the end of its claim and the entry are one
// commit (pkg/mesh wires boltinbox's hook). Set it with WithResultHook.
type ResultHook interface {
	// ResultStored runs inside the write transaction tx that stores
	// result, a NEW tool.result card (not the repeat of a stored card,
	// not a second result the store refuses), after the card, its index
	// entries and the end of its call's claim are written. call is the
	// call's tool.call card when the store finds it (by the admission's
	// card id, else among the turn's last CallScanLimit cards), else nil.
	// ResultStored may run more than once
	// for one Put (the shared transaction is run again when another
	// request in it fails) and must not keep anything from a run but its
	// return values. An error fails the Put: nothing of it is written.
	// after, when not nil, runs once the transaction is committed and
	// fsync'd, in the Put's goroutine (not the committer's) before Put
	// returns, so it must not block: it starts what follows (a wakeup's
	// publish) and returns. A Put that returns nil has made the hook's
	// writes durable and started its after. A nil after says the hook
	// stored nothing for result (the inbox makes no entry for it here);
	// a non-nil one, that it stored or found the call's inbox entry, which
	// PutWithEntry and PutToolResultEntry tell their caller. data is
	// result as stored (its canonical JSON); the hook may keep it.
	ResultStored(tx *bolt.Tx, result, call *card.Card, data []byte) (after func(), err error)
}

// CallScanLimit bounds how many of a turn's last cards the store reads,
// newest first, to hand a ResultHook the call's tool.call card when it
// has not the admission's id (a raw-mode runtime's card): a call's
// card is normally a few cards before its result, and the transaction
// every writer shares must not read a long turn.
const CallScanLimit = 256

// WithResultHook calls h in the transaction of every new tool.result
// card (see ResultHook).
func WithResultHook(h ResultHook) Option {
	return func(c *config) error {
		if h == nil {
			return fmt.Errorf("%w: WithResultHook(nil): a hook is required (omit the option for none)", cardstore.ErrInvalid)
		}
		c.resultHook = h
		return nil
	}
}

// hookRun is one Put's use of the ResultHook: the after funcs of its
// results, collected anew on every run of the request and run once the
// write has committed, and how many new results the hook saw. A nil
// *hookRun (no hook) does nothing.
type hookRun struct {
	hook   ResultHook
	afters []func()
	seen   int // new tool.result cards handed to the hook in this run
}

// hookRun returns the run of a Put, or nil without a hook.
func (s *Store) hookRun() *hookRun {
	if s.cfg.resultHook == nil {
		return nil
	}
	return &hookRun{hook: s.cfg.resultHook}
}

// reset starts a run of the write request again.
func (r *hookRun) reset() {
	if r != nil {
		r.afters, r.seen = r.afters[:0], 0
	}
}

// stored calls the hook for the new result card pc, just written in b.
func (r *hookRun) stored(b *buckets, pc *putCard) error {
	if r == nil || pc.card == nil {
		return nil
	}
	call, err := findCallCard(b, pc.ProjectID, pc.Turn, pc.Call)
	if err != nil {
		return err
	}
	r.seen++
	after, err := r.hook.ResultStored(b.cards.Tx(), pc.card, call, pc.Data)
	if err != nil {
		return fmt.Errorf("result hook: %w", err)
	}
	if after != nil {
		r.afters = append(r.afters, after)
	}
	return nil
}

// finish runs the after funcs once the write returned err == nil, and
// returns err.
func (r *hookRun) finish(err error) error {
	if r == nil || err != nil {
		return err
	}
	for _, after := range r.afters {
		after()
	}
	return nil
}

// entries reports, once the write of pcs has committed, whether the hook
// stored (or found) the inbox entry of every tool.result card among pcs:
// each was new (a repeat of a stored card is not handed to the hook) and
// the hook returned an after for it.
func (r *hookRun) entries(pcs []putCard) bool {
	if r == nil {
		return false
	}
	want := 0
	for i := range pcs {
		if pcs[i].resultKey != nil && !pcs[i].Dup {
			want++
		}
	}
	return want > 0 && r.seen == want && len(r.afters) == want
}

var _ cardstore.EntryPutter = (*Store)(nil)

// PutWithEntry is Put that says whether the commit also stored the inbox
// entry of the cards' tool.result (cardstore.EntryPutter): true when the
// store has a ResultHook and it stored (or found) the entry of every
// tool.result card of the batch, each of them new.
func (s *Store) PutWithEntry(ctx context.Context, cards ...*card.Card) (bool, error) {
	if err := checkCtx(ctx); err != nil {
		return false, err
	}
	if s.closing.Load() {
		return false, cardstore.ErrClosed
	}
	if err := cardstore.CheckPutBatch(len(cards)); err != nil {
		return false, err
	}
	if len(cards) == 0 {
		return false, nil
	}
	pcs, size, err := s.preparePut(cards)
	if err != nil {
		return false, err
	}
	run := s.hookRun()
	if err := run.finish(s.writeResults(ctx, pcs, size, nil, run)); err != nil {
		return false, err
	}
	return run.entries(pcs), nil
}

// findCallCard returns the call's tool.call card: the one with the id the
// admission gives it (utp.CallRef.CallCardID), else the newest among the
// turn's last CallScanLimit cards, or nil.
func findCallCard(b *buckets, project, turn, call string) (*card.Card, error) {
	if turn == "" {
		return nil, nil
	}
	cards := newCardLookup(b, project)
	// The admission's card has a known id: one read instead of a scan
	// (a raw-mode runtime's card is found by the scan).
	id := utp.Ref(project, turn, call).CallCardID()
	if data := cards.get(id); data != nil {
		// The card under this id is the call's unless a runtime wrote
		// another card with it: decode it once and look.
		c, err := decodeCard(data)
		if err != nil {
			return nil, err
		}
		if c.Type == card.TypeToolCall && c.ToolCallID == call {
			return c, nil
		}
	}
	prefix := turnPrefix(project, turn)
	cur := b.recs.Cursor()
	k, v := cur.Seek(turnKey(prefix, math.MaxUint64))
	if k == nil {
		k, v = cur.Last()
	} else if !bytes.Equal(k, turnKey(prefix, math.MaxUint64)) {
		k, v = cur.Prev()
	}
	for n := 0; k != nil && bytes.HasPrefix(k, prefix) && n < CallScanLimit; k, v = cur.Prev() {
		if len(k) != len(prefix)+8 {
			continue
		}
		n++
		data := cards.getID(v)
		if ok, err := isCallCard(data, v, call); err != nil || ok {
			if err != nil {
				return nil, err
			}
			return decodeCard(data)
		}
	}
	return nil, nil
}
