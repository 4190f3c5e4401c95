package kit

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
)

// Every worker of a group keeps its state in one mode (state.ModeBolt or
// state.ModeJetStream). The two modes leave marks the other checks:
//
//   - a worker of the local (bolt) mode holds the group's holder lease in
//     the CardStore (holder.go) and, once it holds it, reads the mode
//     recorded in the group's bucket (kvstate.ModeKey): "jetstream" refuses
//     it;
//   - a worker of the replicated mode probes the holder lease (a short
//     claim under sharedHolder, given back at once): a local holder refuses
//     it; it then records the mode in the bucket and probes again.
//
// Whichever starts second sees the other's mark (each writes its mark
// before it checks the other's).

// sharedHolder is the holder name the replicated mode probes the holder
// lease with.
func sharedHolder(group string) string {
	return "the replicated state of atlas." + group + " (bucket " + atlas.KVBucket(group) + ")"
}

// probeLease is the lease of a probe: the shortest a CardStore takes.
const probeLease = time.Second

// probeLocal fails with state.ErrModeMismatch when a process serves the
// group from its local file (holds the holder lease).
func probeLocal(ctx context.Context, st cardstore.Store, group string) error {
	name := sharedHolder(group)
	_, err := st.Claim(ctx, cardstore.ClaimRequest{ProjectID: HolderProject, Key: HolderKey(group), Holder: name, Lease: probeLease})
	var held *cardstore.ClaimHeldError
	switch {
	case err == nil:
		if err := st.Release(ctx, HolderProject, HolderKey(group), name); err != nil && !errors.Is(err, cardstore.ErrClaimLost) {
			return fmt.Errorf("atlas.%s: give back the state-mode probe: %w", group, err)
		}
		return nil
	case errors.As(err, &held):
		if held.Holder == name { // another worker of the replicated mode probing
			return nil
		}
		return fmt.Errorf("%w: atlas.%s is served from its local file (%s) by %s, and this worker was started with the replicated state: every worker of a group uses one state mode — start this one with --atlas-state bolt on that host and data directory, or stop that one and start every worker of atlas.%s with %s",
			state.ErrModeMismatch, group, filepath.Base(atlas.DBPath(".", group)), held.Holder, group, atlas.StateFlagHint)
	default:
		return fmt.Errorf("atlas.%s: check the group's state mode in the CardStore: %w (is the mesh up?)", group, err)
	}
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
