package kit

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/holder"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
)

// Every worker of a group keeps its state in one mode (state.ModeBolt or
// state.ModeJetStream). The two modes leave marks the other checks:
//
//   - a worker of the local (bolt) mode holds the group's holder lease in
//     the CardStore (lease.go) and, once it holds it, reads the mode
//     recorded in the group's bucket (kvstate.ModeKey): "jetstream" refuses
//     it;
//   - a worker of the replicated mode reads the holder lease: a live local
//     holder refuses it; it then records the mode in the bucket and reads
//     the lease again.
//
// Whichever starts second sees the other's mark (each writes its mark
// before it checks the other's).

// probeLocal fails with state.ErrModeMismatch when a process serves the
// group from its local file: its holder lease is held and has not lapsed.
// It only reads the lease (holder.CheckFree).
func probeLocal(ctx context.Context, st cardstore.Store, group string) error {
	return holder.CheckFree(ctx, st, holderSpec(group))
}

// checkShared records the replicated mode in the group's bucket, then
// probes the holder lease again (see above; the caller probed it first).
func checkShared(ctx context.Context, st cardstore.Store, group string, kv *kvstate.Store) error {
	if err := kv.MarkShared(ctx); err != nil {
		return fmt.Errorf("atlas.%s: %w", group, err)
	}
	return probeLocal(ctx, st, group)
}

// checkLocal fails with state.ErrModeMismatch when the group's bucket
// records the replicated mode.
func checkLocal(ctx context.Context, nc *nats.Conn, group string) error {
	mode, err := kvstate.Mode(ctx, nc, atlas.KVBucket(group))
	if err != nil {
		return fmt.Errorf("atlas.%s: check the group's state mode: %w", group, err)
	}
	if mode == state.ModeJetStream {
		return fmt.Errorf("%w: atlas.%s keeps its state in the JetStream bucket %s, which every worker of it shares, and this worker was started with the local file: start it with %s",
			state.ErrModeMismatch, group, atlas.KVBucket(group), atlas.StateFlagHint)
	}
	return nil
}
