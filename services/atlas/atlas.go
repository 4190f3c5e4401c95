package atlas

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
	"github.com/utpmesh/utpmesh/subjects"
)

// Group names: each is one service of the catalogue ("atlas.<group>"),
// one bbolt file ("atlas-<group>.db") with the bolt state and one KV
// bucket ("atlas_<group>") with the JetStream state.
const (
	GroupTasks     = "tasks"
	GroupNotes     = "notes"
	GroupCalendar  = "calendar"
	GroupWorkflows = "workflows"
	GroupUtility   = "utility"
)

// Groups lists every group, in catalogue order.
var Groups = []string{GroupTasks, GroupNotes, GroupCalendar, GroupWorkflows, GroupUtility}

// The state backends of Deps.State.
const (
	// StateBolt keeps a group's data in its local bbolt file,
	// <DataDir>/atlas-<group>.db: one process serves the group (a second
	// one is refused). The default.
	StateBolt = "bolt"
	// StateJetStream keeps a group's data in the JetStream KV bucket
	// atlas_<group>, shared by every worker of the group (R1, or R3 with
	// StateReplicas 3 on a cluster).
	StateJetStream = "jetstream"
)

// StateFlagHint is how an operator selects the replicated state; error
// messages quote it.
const StateFlagHint = "utpmesh worker --atlas-state jetstream [--atlas-state-replicas 3]"

// ResolveFunc returns the NATS connection and CardStore of a mesh that
// starts after the tools were built (utpmesh up builds its tools before it
// starts the mesh). It blocks until they exist or ctx ends.
type ResolveFunc func(ctx context.Context) (*nats.Conn, cardstore.Store, error)

// Deps are what an ATLAS service needs. NC and Store may be nil when
// Resolve is set; the service then resolves them on first use.
type Deps struct {
	// NC publishes notifications and serves the confirmation endpoint.
	NC *nats.Conn
	// Store receives the receipt cards and holds scheduler claims.
	Store cardstore.Store
	// Resolve provides NC and Store when they are nil at build time.
	Resolve ResolveFunc
	// DataDir holds the service's bbolt file, atlas-<group>.db. Required
	// with the bolt state.
	DataDir string
	// State is where the group keeps its data: StateBolt ("" too) or
	// StateJetStream.
	State string
	// StateReplicas is the replica count of the JetStream state's bucket:
	// 1 (default) or 3. Only with StateJetStream.
	StateReplicas int
	// Context bounds what the service runs besides its tool handlers (the
	// confirmation endpoint, the workflow scheduler) and the life of its
	// bbolt file: when it ends they stop and the file is closed. Nil: they
	// live until the process exits.
	Context context.Context
	// PurgeEvery is how often the service deletes its call records and
	// pending confirmations older than toolkit.RecordMaxAge; 0:
	// toolkit.PurgeEvery (an hour). Negative: never.
	PurgeEvery time.Duration
	// Version is the protocol version of the service's own subjects (the
	// confirmation endpoint); default subjects.DefaultVersion. Tool calls
	// answer on the version of their command.
	Version string
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// KVBucket is the JetStream KV bucket of a group's replicated state:
// atlas_<group>.
func KVBucket(group string) string { return "atlas_" + group }

// StatePublishSubjects are the subjects a worker's NATS user must be
// allowed to publish to for the replicated state of group (besides
// subscribing to its _INBOX.>); kvstate's tests prove they suffice.
func StatePublishSubjects(group string) []string { return kvstate.PublishSubjects(KVBucket(group)) }

// DBPath returns the bbolt file of a group: <dataDir>/atlas-<group>.db.
func DBPath(dataDir, group string) string {
	return filepath.Join(dataDir, "atlas-"+group+".db")
}

// Normalize checks d and fills its defaults.
func (d Deps) Normalize(group string) (Deps, error) {
	switch d.State {
	case "", StateBolt:
		d.State = StateBolt
		if d.StateReplicas > 1 {
			return d, fmt.Errorf("atlas.%s: %d state replicas need the replicated state: pass --atlas-state jetstream (the local bbolt state has one copy)", group, d.StateReplicas)
		}
	case StateJetStream:
		if d.StateReplicas != 0 && d.StateReplicas != 1 && d.StateReplicas != 3 {
			return d, fmt.Errorf("atlas.%s: %d state replicas: use 1, or 3 on a NATS cluster of at least three servers", group, d.StateReplicas)
		}
	default:
		return d, fmt.Errorf("atlas.%s: state %q: use %s (the local file, one worker per group) or %s (a JetStream KV bucket every worker shares)", group, d.State, StateBolt, StateJetStream)
	}
	if d.DataDir == "" && d.State == StateBolt {
		return d, fmt.Errorf("atlas.%s: no data directory: pass --data DIR (the service keeps %s there)", group, filepath.Base(DBPath("x", group)))
	}
	if (d.NC == nil || d.Store == nil) && d.Resolve == nil {
		return d, fmt.Errorf("atlas.%s: needs a NATS connection and a CardStore (or a Resolve function that provides them)", group)
	}
	if d.Version == "" {
		d.Version = subjects.DefaultVersion
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	d.Logger = d.Logger.With("service", "atlas."+group)
	return d, nil
}

// Conn returns NC and Store, resolving them when they are nil.
func (d Deps) Conn(ctx context.Context) (*nats.Conn, cardstore.Store, error) {
	if d.NC != nil && d.Store != nil {
		return d.NC, d.Store, nil
	}
	if d.Resolve == nil {
		return nil, nil, fmt.Errorf("atlas: no NATS connection or CardStore configured")
	}
	return d.Resolve(ctx)
}
