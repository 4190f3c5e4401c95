// Package catalog maps the tool-service names that `utpmesh worker` and
// `utpmesh up` accept to the services that build them. Every tool service
// has the same shape: a factory that takes Deps and returns worker tools.
package catalog

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/config"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/calendar"
	"github.com/utpmesh/utpmesh/services/atlas/notes"
	"github.com/utpmesh/utpmesh/services/atlas/tasks"
	"github.com/utpmesh/utpmesh/services/atlas/utility"
	"github.com/utpmesh/utpmesh/services/atlas/workflows"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/atpconfig"
	"github.com/utpmesh/utpmesh/services/atp/ratelimit"
	atptools "github.com/utpmesh/utpmesh/services/atp/tools"
	"github.com/utpmesh/utpmesh/services/cynode"
	"github.com/utpmesh/utpmesh/services/cynode/cynodeconfig"
	"github.com/utpmesh/utpmesh/services/echo"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// Deps is what a tool service may use.
type Deps struct {
	NC       *nats.Conn
	Store    cardstore.Store
	Registry registry.Registry
	// DataDir is where a service keeps its own files (one bbolt file per
	// service); services that need it fail clearly when it is empty.
	DataDir string
	// Context bounds what a service runs besides its handlers (the ATLAS
	// confirmation endpoints and workflow scheduler) and its open files;
	// nil: they live until the process exits.
	Context context.Context
	// Late provides NC and Store to services built before the mesh that
	// serves them has started: call Late.Set once it is up. (utpmesh up
	// builds its services from mesh.Config.Services, when NC and Store
	// exist, and needs no Late.)
	Late *Late
	// Logger is the process's logger, which services log to; nil means
	// slog.Default().
	Logger *slog.Logger
	// AtlasState is where the ATLAS groups keep their data: "bolt" (or
	// "": a file under DataDir, one worker per group) or "jetstream" (a
	// key-value bucket every worker of the group shares); see
	// atlas.Deps.State.
	AtlasState string
	// AtlasStateReplicas is the replica count of that bucket (3 on a
	// cluster).
	AtlasStateReplicas int
	// ATPState is where ATP keeps its data: "jetstream" (or "": the KV
	// bucket atp_state every worker shares, the default) or "bolt" (a file
	// under DataDir, one worker); see atp.Deps.State.
	ATPState string
	// ATPStateReplicas is the replica count of that bucket: 0 adopts the
	// bucket the core made (a worker), 1 or 3 (utpmesh up).
	ATPStateReplicas int
	// CynodeState is where CyNodeAI keeps its records and contents:
	// "jetstream" (or "": the KV bucket cynode_state and object store
	// cynode_blobs every worker shares, the default) or "bolt" (a file and
	// a directory under DataDir, one worker); see cynode.Deps.State.
	CynodeState string
	// CynodeStateReplicas is the replica count of that bucket and object
	// store: 0 adopts what the core made (a worker), 1 or 3 (utpmesh up).
	CynodeStateReplicas int
	// Config is the configuration file (--config), already validated
	// with the catalogues' sections (atpconfig, cynodeconfig); each
	// service takes its own section. Nil: no file.
	Config *config.File
}

// Late hands a mesh's NATS connection and CardStore to services built
// before the mesh started (toolkit.Late: one implementation).
type Late = toolkit.Late

// NewLate returns a Late that is not set yet.
func NewLate() *Late { return toolkit.NewLate() }

// atlasService adapts an ATLAS group's factory to the catalogue.
func atlasService(group, desc string, build func(atlas.Deps) ([]worker.Tool, error)) Service {
	return Service{Name: "atlas." + group, Description: desc, InUp: true, KeepsFiles: true, SharedState: true,
		Buckets: []string{atlas.KVBucket(group)},
		Local:   func(d Deps) bool { return d.AtlasState != atlas.StateJetStream },
		Publish: func(string) []string { return atlas.StatePublishSubjects(group) },
		Build: func(d Deps) ([]worker.Tool, error) {
			ad := atlas.Deps{NC: d.NC, Store: d.Store, DataDir: d.DataDir, Context: d.Context, Logger: d.Logger,
				State: d.AtlasState, StateReplicas: d.AtlasStateReplicas}
			if d.Late != nil {
				ad.Resolve = d.Late.Resolve
			}
			return build(ad)
		}}
}

// cynodeService adapts the CyNodeAI catalogue (one service: its tools share
// one store and one gateway) to the catalogue. Its records and contents
// live in the state engine (cynode.Provision makes the bucket and object
// store), so every node of a cluster may serve it.
func cynodeService() Service {
	return Service{Name: "cynode", Description: "CyNodeAI catalogue behind its gateway: artifact.*, db.*, model.*, skills.*, node.*, help.get, web.*, api.call, git.*, sandbox.*",
		KeepsFiles: true, SharedState: true, Buckets: []string{cynode.StateBucket},
		// In either state mode its data directory holds cynode.json, git
		// clones and sandboxes: one worker per directory (the lock).
		Local: func(Deps) bool { return true },
		Publish: func(ver string) []string {
			return append(cynode.PublishSubjects(ver), cynode.StatePublishSubjects()...)
		},
		Subscribe: cynode.SubscribeSubjects, Provision: cynode.Provision,
		Build: func(d Deps) ([]worker.Tool, error) {
			cd := cynode.Deps{NC: d.NC, Cards: d.Store, DataDir: d.DataDir, Context: d.Context, Logger: d.Logger,
				State: d.CynodeState, StateReplicas: d.CynodeStateReplicas}
			if err := cynodeconfig.Apply(d.Config, &cd, d.Logger); err != nil {
				return nil, err
			}
			if d.Late != nil {
				cd.Resolve = func(ctx context.Context) (*nats.Conn, error) {
					nc, _, err := d.Late.Resolve(ctx)
					return nc, err
				}
			}
			return cynode.Build(cd)
		}}
}

// Factory builds a service's tools.
type Factory func(Deps) ([]worker.Tool, error)

// Service is one entry of the catalogue.
type Service struct {
	// Name is what `utpmesh worker NAME` takes.
	Name string
	// Description says what the service does.
	Description string
	// Build makes its tools.
	Build Factory
	// InUp reports whether `utpmesh up` serves it by default.
	InUp bool
	// KeepsFiles reports whether the service keeps its own files under
	// Deps.DataDir (then `utpmesh worker` locks that directory).
	KeepsFiles bool
	// SharedState reports whether the service can keep its state where
	// every worker of it sees it (the state engine's JetStream mode), so
	// that it may run on every node of a cluster. A service that keeps
	// files without it runs as one worker only.
	SharedState bool
	// Local reports whether, with d, a SharedState service keeps its
	// state in a local file after all (then `utpmesh worker` locks the
	// data directory). Nil: it does whenever KeepsFiles is set.
	Local func(d Deps) bool
	// Publish lists the subjects beyond the protocol's that a worker of
	// the service publishes to (its own buckets' data and JetStream
	// subjects, its audit records…), for its NATS identity's permissions:
	// exactly its own, never a stream's create or update.
	Publish func(ver string) []string
	// Provision creates and configures the service's buckets with the
	// mesh core's connection and the mesh's replica count (`utpmesh up`
	// runs it for every catalogue service at start): worker identities
	// manage no stream. Nil: the service has none.
	Provision func(ctx context.Context, nc *nats.Conn, replicas int) error
	// Subscribe lists further subjects a worker of the service serves
	// (e.g. the ATLAS confirmation endpoints), with * for project and
	// channel, for its NATS identity's permissions.
	Subscribe func(ver string) []string
	// Buckets are the service's KV buckets whose deleted keys leave delete
	// markers (its state engine's records): the mesh core purges the old
	// markers (retention.MarkerPurger), since its workers may not purge a
	// stream. A bucket the service has not made (another state mode) is
	// skipped.
	Buckets []string
}

var services = map[string]Service{
	"echo": {Name: "echo", Description: "demo tool: returns its arguments (smoke tests, benchmarks)", InUp: true,
		Build: func(Deps) ([]worker.Tool, error) { return []worker.Tool{echo.Tool()}, nil }},
	"atlas.tasks":     atlasService(atlas.GroupTasks, "ATLAS tasks: TASK_CREATE/LIST/UPDATE/DELETE", tasks.Build),
	"atlas.notes":     atlasService(atlas.GroupNotes, "ATLAS notes: NOTE_CREATE/SEARCH/GET/DELETE", notes.Build),
	"atlas.calendar":  atlasService(atlas.GroupCalendar, "ATLAS calendar: CALENDAR_GET_DAY/CREATE_BLOCKS/DELETE_BLOCKS (confirmations)", calendar.Build),
	"atlas.workflows": atlasService(atlas.GroupWorkflows, "ATLAS workflows: WORKFLOW_SAVE/DELETE/ENABLE/RUN/LOGS and the cron scheduler", workflows.Build),
	"atlas.utility":   atlasService(atlas.GroupUtility, "ATLAS utility: LOG_EVENT, NOTIFY_USER/LIST, ATLAS_CONFIRM/CANCEL", utility.Build),
	"cynode":          cynodeService(),
	"atp":             atpService(),
}

// atpService adapts the ATP catalogue (one service: its tools share one
// bookings file) to the catalogue.
func atpService() Service {
	return Service{Name: "atp", Description: "ATP catalogue: atp_* tools on Booking Objects, atp_invoke_hem, operators' booking and HEM tools",
		InUp: true, KeepsFiles: true, SharedState: true, Buckets: []string{atp.StateBucket},
		Publish: func(string) []string {
			return append(ratelimit.PublishSubjects(ratelimit.DefaultBucket), kvstate.PublishSubjects(atp.StateBucket)...)
		},
		Provision: func(ctx context.Context, nc *nats.Conn, replicas int) error {
			if err := ratelimit.Provision(ctx, nc, ratelimit.DefaultBucket, replicas); err != nil {
				return err
			}
			return kvstate.Provision(ctx, nc, kvstate.Config{Bucket: atp.StateBucket, Replicas: max(replicas, 1),
				Description: "ATP bookings, HEM tasks, notifications, activities (utpmesh)"})
		},
		Local: func(d Deps) bool { return d.ATPState == atp.StateBolt },
		Build: func(d Deps) ([]worker.Tool, error) {
			ad := atp.Deps{NC: d.NC, Cards: d.Store, DataDir: d.DataDir, Context: d.Context, Logger: d.Logger,
				State: d.ATPState, StateReplicas: d.ATPStateReplicas}
			atpconfig.Apply(d.Config, &ad, d.Logger)
			if d.Late != nil {
				ad.Resolve = d.Late.Resolve
			}
			return atptools.Build(ad)
		}}
}

// Lookup returns the service of a name.
func Lookup(name string) (Service, error) {
	s, ok := services[name]
	if !ok {
		return Service{}, fmt.Errorf("unknown tool service %q; available: %s", name, strings.Join(Names(), ", "))
	}
	return s, nil
}

// Names lists every service name, sorted.
func Names() []string {
	out := make([]string, 0, len(services))
	for n := range services {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Default lists the services `utpmesh up` serves.
func Default() []Service {
	var out []Service
	for _, n := range Names() {
		if services[n].InUp {
			out = append(out, services[n])
		}
	}
	return out
}

// KeepsLocal reports whether the service keeps its state in local files
// under Deps.DataDir with d (then `utpmesh worker` locks that directory).
func (s Service) KeepsLocal(d Deps) bool {
	if !s.KeepsFiles {
		return false
	}
	return !s.SharedState || s.Local == nil || s.Local(d)
}

// KeepFiles reports whether any of the named services keeps its own files
// under Deps.DataDir; unknown names count as not.
func KeepFiles(names []string) bool {
	for _, n := range names {
		if services[n].KeepsFiles {
			return true
		}
	}
	return false
}

// Provision runs every service's Provision with the mesh core's
// connection nc and the mesh's replica count (0 or 1: one server): their
// buckets exist before any worker starts.
func Provision(ctx context.Context, nc *nats.Conn, replicas int) error {
	for _, n := range Names() {
		if p := services[n].Provision; p != nil {
			if err := p(ctx, nc, replicas); err != nil {
				return fmt.Errorf("service %s: %w", n, err)
			}
		}
	}
	return nil
}

// Buckets lists the KV buckets of every service whose delete markers the
// mesh core purges (Service.Buckets), sorted: what `utpmesh up` passes to
// mesh.Config.Markers.
func Buckets() []string {
	var out []string
	for _, n := range Names() {
		out = append(out, services[n].Buckets...)
	}
	sort.Strings(out)
	return out
}

// Build builds the tools of the named services.
func Build(names []string, d Deps) ([]worker.Tool, error) {
	var tools []worker.Tool
	for _, n := range names {
		s, err := Lookup(n)
		if err != nil {
			return nil, err
		}
		ts, err := s.Build(d)
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", n, err)
		}
		tools = append(tools, ts...)
	}
	return tools, nil
}
