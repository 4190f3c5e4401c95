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
	"github.com/utpmesh/utpmesh/services/state/kvstate"
)

// stateStart bounds how long Open waits for the replicated state.
const stateStart = 30 * time.Second

// openState opens the service's state in its mode (atp.Deps.State):
//
//   - jetstream: the KV bucket atp.StateBucket, at once when Deps.NC is
//     set (a missing bucket fails the start), else on first use. It
//     records the mode in the bucket and imports an atp.db an earlier
//     version left in the data directory.
//   - bolt: the file atp.StatePath under the data directory, refused
//     when the bucket records that the service's state is replicated
//     (state.ErrModeMismatch); it imports an atp.db too.
func openState(deps atp.Deps) (state.Store, error) {
	cfg := kvstate.Config{Bucket: atp.StateBucket, Replicas: deps.StateReplicas, Description: "ATP bookings, HEM tasks, notifications, activities (utpmesh)"}
	onOpen := func(ctx context.Context, kv *kvstate.Store) error {
		if err := kv.MarkShared(ctx); err != nil {
			return err
		}
		return importLegacy(ctx, deps, kv)
	}
	if deps.State == atp.StateBolt {
		if deps.NC != nil {
			ctx, cancel := context.WithTimeout(context.Background(), stateStart)
			mode, err := kvstate.Mode(ctx, deps.NC, atp.StateBucket)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("atp: check the service's state mode: %w", err)
			}
			if mode == state.ModeJetStream {
				return nil, fmt.Errorf("%w: the atp service keeps its state in the JetStream bucket %s, which every worker shares, and this worker was started with the local file (%s): start it with --atp-state jetstream (the default)",
					state.ErrModeMismatch, atp.StateBucket, atp.StateFile)
			}
		}
		bs, err := boltstate.Open(atp.StatePath(deps.DataDir), 0)
		if err != nil {
			return nil, fmt.Errorf("atp: open %s: %w (is another atp worker using this data directory?)", atp.StatePath(deps.DataDir), err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), stateStart)
		defer cancel()
		if err := importLegacy(ctx, deps, bs); err != nil {
			_ = bs.Close()
			return nil, err
		}
		return bs, nil
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
	kv, err := kvstate.Open(ctx, deps.NC, cfg)
	if err != nil {
		return nil, fmt.Errorf("atp: replicated state: %w (the mesh core creates the bucket %s: is 'utpmesh up' of this version running?)", err, atp.StateBucket)
	}
	if err := onOpen(ctx, kv); err != nil {
		return nil, err
	}
	return kv, nil
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
