package cynode

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/services/cynode/store"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/blob/objblob"
	"github.com/utpmesh/utpmesh/services/state/holder"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
)

// Where the service keeps its records and contents (Deps.State): the
// state engine's modes (package state).
const (
	// StateJetStream: the KV bucket StateBucket and the object store
	// BlobBucket, shared by every worker of the service (R1 on one
	// server, R3 on a cluster). The default.
	StateJetStream = state.ModeJetStream
	// StateBolt: the local file StateFile and directory BlobDir under the
	// data directory; one worker serves them, and only where no worker of
	// the service ever used the bucket.
	StateBolt = state.ModeBolt
)

// The replicated state's bucket and object store; the mesh core creates
// them (Provision), workers only use them.
const (
	StateBucket = "cynode_state"
	BlobBucket  = "cynode_blobs"
)

// The local state's file and blob directory under the data directory.
const (
	StateFile = "cynode-state.db"
	BlobDir   = "cynode-blobs"
)

// StateFlagHint is how an operator picks the state mode of a worker.
const StateFlagHint = "utpmesh worker --cynode-state jetstream|bolt cynode"

// holderSpec is the holder lease of the local state (package holder).
var holderSpec = holder.Spec{Service: "cynode", Project: "_cynode", Key: "cynode/state", File: StateFile, FlagHint: StateFlagHint}

// stateStart bounds how long Open waits for the replicated state.
const stateStart = 30 * time.Second

// provisionState creates the service's KV bucket and object store with the
// mesh core's connection and replica count (0: one server) and records
// the replicated mode in the bucket: worker identities manage no stream.
func provisionState(ctx context.Context, nc *nats.Conn, replicas int) error {
	if err := kvstate.Provision(ctx, nc, kvCfg(max(replicas, 1))); err != nil {
		return err
	}
	return objblob.Provision(ctx, nc, blobCfg(max(replicas, 1)))
}

func kvCfg(replicas int) kvstate.Config {
	return kvstate.Config{Bucket: StateBucket, Replicas: replicas, Description: "CyNodeAI projects, tasks, jobs, settings, artifact and skill records (utpmesh)"}
}

func blobCfg(replicas int) objblob.Config {
	return objblob.Config{Bucket: BlobBucket, Replicas: replicas, Description: "CyNodeAI artifact contents and skill bodies (utpmesh)"}
}

// StatePublishSubjects are the subjects of the replicated state a cynode
// worker publishes to: its bucket's and object store's, nothing else.
func StatePublishSubjects() []string {
	return append(kvstate.PublishSubjects(StateBucket), objblob.PublishSubjects(BlobBucket)...)
}

func (d Deps) checkState() (Deps, error) {
	switch d.State {
	case "":
		d.State = StateJetStream
	case StateJetStream, StateBolt:
	default:
		return d, fmt.Errorf("cynode: state %q: use %s (a KV bucket and object store every worker shares) or %s (a local file, one worker)", d.State, StateJetStream, StateBolt)
	}
	if d.StateReplicas < 0 || d.StateReplicas > 5 || (d.State == StateBolt && d.StateReplicas > 1) {
		return d, fmt.Errorf("cynode: %d state replicas: use 1, or 3 on a NATS cluster of at least three servers, with the %s state", d.StateReplicas, StateJetStream)
	}
	return d, nil
}

// openStore opens the service's records and contents in its mode and runs
// ready once with them (the seed, the clean-up of finished tasks' clones):
//
//   - jetstream: the bucket StateBucket and object store BlobBucket, at
//     once when Deps.NC is set, else on first use. It records the mode in
//     the bucket and imports a cynode.db an earlier version left in the
//     data directory. It is refused while a worker of the local mode
//     holds the service (its lease in the CardStore, Deps.Cards).
//   - bolt: the file StateFile and directory BlobDir under the data
//     directory, behind the holder lease (with Deps.Cards), refused when
//     the bucket records that the service's state is replicated
//     (state.ErrModeMismatch); it imports a cynode.db too.
func openStore(d Deps, ready func(ctx context.Context, e *store.Engine) error) (store.Store, error) {
	if d.State == StateBolt {
		return openLocal(d, ready)
	}
	// No live local holder before and after the mode is recorded in the
	// bucket (a local worker takes its lease, then reads the record:
	// whichever starts second sees the other).
	prepare := func(ctx context.Context, kv *kvstate.Store, e *store.Engine) error {
		if d.Cards != nil {
			if err := holder.CheckFree(ctx, d.Cards, holderSpec); err != nil {
				return err
			}
		}
		if err := kv.MarkShared(ctx); err != nil {
			return err
		}
		if d.Cards != nil {
			if err := holder.CheckFree(ctx, d.Cards, holderSpec); err != nil {
				return err
			}
		}
		if err := importLegacy(ctx, d, e); err != nil {
			return err
		}
		return ready(ctx, e)
	}
	if d.NC == nil {
		blobs := objblob.NewLazy(d.Resolve, blobCfg(d.StateReplicas))
		kv := kvstate.NewLazy(d.Resolve, kvCfg(d.StateReplicas), func(ctx context.Context, kv *kvstate.Store) error {
			return prepare(ctx, kv, store.New(kv, blobs))
		})
		return store.New(kv, blobs), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), stateStart)
	defer cancel()
	if d.Cards != nil { // refused before it touches the bucket
		if err := holder.CheckFree(ctx, d.Cards, holderSpec); err != nil {
			return nil, err
		}
	}
	kv, err := kvstate.Open(ctx, d.NC, kvCfg(d.StateReplicas))
	if err != nil {
		return nil, fmt.Errorf("cynode: replicated state: %w (the mesh core creates the bucket %s: is 'utpmesh up' of this version running?)", err, StateBucket)
	}
	blobs, err := objblob.Open(ctx, d.NC, blobCfg(d.StateReplicas))
	if err != nil {
		return nil, fmt.Errorf("cynode: replicated contents: %w", err)
	}
	e := store.New(kv, blobs)
	if err := prepare(ctx, kv, e); err != nil {
		return nil, err
	}
	return e, nil
}

// openLocal opens the local state: with a mesh at hand it takes the
// holder lease, then refuses when the bucket records the replicated mode;
// then it opens the file and directory and imports a cynode.db.
func openLocal(d Deps, ready func(ctx context.Context, e *store.Engine) error) (store.Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), stateStart)
	defer cancel()
	var h *holder.Held
	if d.Cards != nil {
		var err error
		if h, err = holder.Take(ctx, d.Cards, holderSpec, d.DataDir, d.Logger); err != nil {
			return nil, err
		}
	}
	fail := func(err error) (store.Store, error) {
		if h != nil {
			h.Release()
		}
		return nil, err
	}
	if d.NC != nil {
		mode, err := kvstate.Mode(ctx, d.NC, StateBucket)
		if err != nil {
			return fail(fmt.Errorf("cynode: check the service's state mode: %w", err))
		}
		if mode == state.ModeJetStream {
			return fail(fmt.Errorf("%w: the cynode service keeps its data in the JetStream bucket %s and object store %s, which every worker shares, and this worker was started with the local file (%s): start it with --cynode-state jetstream (the default)",
				state.ErrModeMismatch, StateBucket, BlobBucket, StateFile))
		}
	}
	e, err := store.OpenLocal(filepath.Join(d.DataDir, StateFile), filepath.Join(d.DataDir, BlobDir), 0)
	if err != nil {
		return fail(err)
	}
	if err := importLegacy(ctx, d, e); err != nil {
		_ = e.Close()
		return fail(err)
	}
	if err := ready(ctx, e); err != nil {
		_ = e.Close()
		return fail(err)
	}
	if h == nil {
		return e, nil
	}
	return &heldStore{Store: e, h: h}, nil
}

// heldStore is the local state with its holder lease, given up on Close.
type heldStore struct {
	store.Store
	h *holder.Held
}

// Close closes the file and gives the lease up.
func (s *heldStore) Close() error {
	err := s.Store.Close()
	s.h.Release()
	return err
}

// importLegacy imports the data directory's cynode.db (written before the
// state engine) once.
func importLegacy(ctx context.Context, d Deps, e *store.Engine) error {
	path := filepath.Join(d.DataDir, store.LegacyFile)
	n, err := store.ImportLegacy(ctx, path, e)
	if err != nil {
		return fmt.Errorf("cynode: %w", err)
	}
	if n != (store.Imported{}) {
		logger(d).Info("cynode: imported the data file of an earlier version", "file", path,
			"projects", n.Projects, "tasks", n.Tasks, "jobs", n.Jobs, "settings", n.Settings, "artifacts", n.Artifacts,
			"contents", n.Blobs, "skills", n.Skills, "already_there", n.Skipped, "renamed_to", store.LegacyFile+store.ImportedSuffix)
	}
	return nil
}

func logger(d Deps) *slog.Logger {
	if d.Logger == nil {
		return slog.Default()
	}
	return d.Logger
}
