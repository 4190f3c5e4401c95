package tools

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/boltstate"
	"github.com/utpmesh/utpmesh/services/state/holder"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
)

// stateStart bounds how long Open waits for the replicated state.
const stateStart = 30 * time.Second

// holderSpec is the holder lease of ATP's local state (atp.StateBolt,
// package holder): a CardStore claim on key atp/state in project _atp. A
// second worker of the local state elsewhere is refused by it
// (holder.ErrHeld), and a worker of the replicated state reads it
// (holder.CheckFree, state.ErrModeMismatch).
var holderSpec = holder.Spec{Service: "atp", Project: "_atp", Key: "atp/state", File: atp.StateFile, FlagHint: atp.StateFlagHint,
	LocalFlag: "--atp-state bolt", SharedFlag: "--atp-state jetstream"}

// openState opens the service's state in its mode (atp.Deps.State):
//
//   - jetstream: the KV bucket atp.StateBucket, at once when Deps.NC is
//     set (a missing bucket fails the start), else on first use. It
//     records the mode in the bucket and imports an atp.db an earlier
//     version left in the data directory.
//   - bolt: the file atp.StatePath under the data directory (openLocal),
//     behind a holder lease in the CardStore (holderSpec), refused when the
//     bucket records that the service's state is replicated
//     (state.ErrModeMismatch); it imports an atp.db too.
//
// A worker of the replicated mode is refused while a local holder lives.
func openState(deps atp.Deps) (state.Store, error) {
	cfg := kvstate.Config{Bucket: atp.StateBucket, Replicas: deps.StateReplicas, Description: "ATP bookings, HEM tasks, notifications, activities (utpmesh)"}
	if deps.State == atp.StateBolt {
		return openLocal(deps)
	}
	// The replicated mode: no live local holder before and after the mode
	// is recorded in the bucket (a local worker takes its lease, then
	// reads the record: whichever starts second sees the other).
	onOpen := func(ctx context.Context, kv *kvstate.Store) error {
		_, cards, err := deps.Conn(ctx)
		if err != nil {
			cards = nil // no CardStore (a test's Deps): no local holder to look for
		}
		if cards != nil {
			if err := holder.CheckFree(ctx, cards, holderSpec); err != nil {
				return err
			}
		}
		if err := kv.MarkShared(ctx); err != nil {
			return err
		}
		if cards != nil {
			if err := holder.CheckFree(ctx, cards, holderSpec); err != nil {
				return err
			}
		}
		return importLegacy(ctx, deps, kv)
	}
	if deps.NC == nil {
		if deps.Resolve == nil {
			return nil, errors.New("atp: the replicated state needs a NATS connection: pass Deps.NC or Deps.Resolve (or --atp-state bolt)")
		}
		resolve := func(ctx context.Context) (*nats.Conn, error) {
			nc, _, err := deps.Resolve(ctx)
			return nc, err
		}
		return kvstate.NewLazy(resolve, cfg, onOpen), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), stateStart)
	defer cancel()
	if deps.Cards != nil { // refused before it touches the bucket
		if err := holder.CheckFree(ctx, deps.Cards, holderSpec); err != nil {
			return nil, err
		}
	}
	kv, err := kvstate.Open(ctx, deps.NC, cfg)
	if err != nil {
		return nil, fmt.Errorf("atp: replicated state: %w (the mesh core creates the bucket %s: is 'utpmesh up' of this version running?)", err, atp.StateBucket)
	}
	if err := onOpen(ctx, kv); err != nil {
		return nil, err
	}
	return kv, nil
}

// openLocal opens the local state: with a mesh at hand it takes the
// holder lease, then refuses when the bucket records the replicated mode;
// then it opens the file and imports an atp.db.
func openLocal(deps atp.Deps) (state.Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), stateStart)
	defer cancel()
	var h *holder.Held
	if deps.Cards != nil {
		var err error
		if h, err = holder.Take(ctx, deps.Cards, holderSpec, deps.DataDir, deps.Logger); err != nil {
			return nil, err
		}
	}
	fail := func(err error) (state.Store, error) {
		if h != nil {
			h.Release()
		}
		return nil, err
	}
	if deps.NC != nil {
		mode, err := kvstate.Mode(ctx, deps.NC, atp.StateBucket)
		if err != nil {
			return fail(fmt.Errorf("atp: check the service's state mode: %w", err))
		}
		if mode == state.ModeJetStream {
			return fail(fmt.Errorf("%w: the atp service keeps its state in the JetStream bucket %s, which every worker shares, and this worker was started with the local file (%s): start it with --atp-state jetstream (the default)",
				state.ErrModeMismatch, atp.StateBucket, atp.StateFile))
		}
	}
	bs, err := boltstate.Open(atp.StatePath(deps.DataDir), 0)
	if err != nil {
		return fail(fmt.Errorf("atp: open %s: %w (is another atp worker using this data directory?)", atp.StatePath(deps.DataDir), err))
	}
	if err := importLegacy(ctx, deps, bs); err != nil {
		_ = bs.Close()
		return fail(err)
	}
	if h == nil {
		return bs, nil
	}
	return &heldStore{Store: bs, h: h}, nil
}

// heldStore is the local state with its holder lease, given up on Close.
type heldStore struct {
	state.Store
	h *holder.Held
}

// Close closes the file and gives the lease up.
func (s *heldStore) Close() error {
	err := s.Store.Close()
	s.h.Release()
	return err
}

// importLegacy imports the data directory's atp.db (written before the
// state engine) once.
func importLegacy(ctx context.Context, deps atp.Deps, dst state.Store) error {
	n, err := booking.ImportLegacy(ctx, atp.DBPath(deps.DataDir), dst)
	if err != nil {
		return fmt.Errorf("atp: %w", err)
	}
	if n != (booking.Imported{}) {
		deps.Logger.Info("atp: imported the bookings file of an earlier version", "file", atp.DBPath(deps.DataDir),
			"bookings", n.Bookings, "events", n.Events, "hem_tasks", n.HEMTasks, "notifications", n.Notifications,
			"activities", n.Activities, "already_there", n.Skipped, "renamed_to", atp.FileName+booking.ImportedSuffix)
	}
	return nil
}
