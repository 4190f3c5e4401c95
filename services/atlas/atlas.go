package atlas

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/subjects"
)

// Group names: each is one service of the catalogue ("atlas.<group>") and
// one bbolt file ("atlas-<group>.db").
const (
	GroupTasks     = "tasks"
	GroupNotes     = "notes"
	GroupCalendar  = "calendar"
	GroupWorkflows = "workflows"
	GroupUtility   = "utility"
)

// Groups lists every group, in catalogue order.
var Groups = []string{GroupTasks, GroupNotes, GroupCalendar, GroupWorkflows, GroupUtility}

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
	// DataDir holds the service's bbolt file, atlas-<group>.db. Required.
	DataDir string
	// Context bounds what the service runs besides its tool handlers (the
	// confirmation endpoint, the workflow scheduler) and the life of its
	// bbolt file: when it ends they stop and the file is closed. Nil: they
	// live until the process exits.
	Context context.Context
	// Version is the protocol version of the service's own subjects (the
	// confirmation endpoint); default subjects.DefaultVersion. Tool calls
	// answer on the version of their command.
	Version string
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// DBPath returns the bbolt file of a group: <dataDir>/atlas-<group>.db.
func DBPath(dataDir, group string) string {
	return filepath.Join(dataDir, "atlas-"+group+".db")
}

// Normalize checks d and fills its defaults.
func (d Deps) Normalize(group string) (Deps, error) {
	if d.DataDir == "" {
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
