package atp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/services/atp/atpauthz"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/atp/hem"
	"github.com/utpmesh/utpmesh/services/atp/octo"
	"github.com/utpmesh/utpmesh/services/atp/rails"
	"github.com/utpmesh/utpmesh/services/atp/ratelimit"
	"github.com/utpmesh/utpmesh/services/state"
)

// FileName is the bookings file the service kept under the data
// directory before its state moved to the state engine: a worker that
// finds one imports it once (booking.ImportLegacy) and renames it
// atp.db.imported.
const FileName = "atp.db"

// Where the service keeps its state (Deps.State): the state engine's
// modes (package state).
const (
	// StateJetStream: the JetStream KV bucket StateBucket, shared by
	// every worker of the service (R1 on one server, R3 on a cluster).
	// The default.
	StateJetStream = state.ModeJetStream
	// StateBolt: the local bbolt file StateFile under the data
	// directory; one worker serves it, and only where no worker of the
	// service ever used the bucket.
	StateBolt = state.ModeBolt
)

// StateBucket is the KV bucket of the replicated state; the mesh core
// creates it (catalog's Provision), workers only use it.
const StateBucket = "atp_state"

// StateFile is the local state's file under the data directory.
const StateFile = "atp-state.db"

// StateFlagHint is how an operator picks the state mode of a worker.
const StateFlagHint = "utpmesh worker --atp-state jetstream|bolt atp"

// Deps are what the ATP service needs.
type Deps struct {
	// NC and Cards report atp_invoke_hem resolutions into the invoking
	// turn (a tool.result card and an inbox report). When nil, Resolve
	// provides them; without either, resolutions are only polled.
	NC    *nats.Conn
	Cards cardstore.Store
	// Resolve provides NC and Cards of a mesh started after the service.
	Resolve func(ctx context.Context) (*nats.Conn, cardstore.Store, error)
	// DataDir holds the local state's file (StateBolt) and an atp.db
	// left by an earlier version, which is imported once. Required.
	DataDir string
	// State is where the service keeps its state: StateJetStream ("" too)
	// or StateBolt.
	State string
	// StateReplicas is the replica count of the replicated state's
	// bucket: 0 adopts the bucket the mesh core made (a worker), 1 or 3
	// (utpmesh up, which makes it).
	StateReplicas int
	// Context bounds the service's timeout loop and the life of its file;
	// nil: they live until the process exits.
	Context context.Context
	// Now is the clock (timeouts, event times); default time.Now.
	Now func() time.Time
	// TickEvery is how often state timeouts are applied; default 10s.
	// Negative: never (tests call Service.Tick).
	TickEvery time.Duration
	// PurgeEvery is how often the service deletes its call records older
	// than toolkit.RecordMaxAge; 0: toolkit.PurgeEvery (an hour).
	// Negative: never (tests call Service.PurgeRecords).
	PurgeEvery time.Duration
	// Notifiers deliver atp_notify_traveller messages per channel
	// (EMAIL, SMS, WHATSAPP); a channel without one fails its calls with
	// upstream_unavailable naming the missing configuration.
	Notifiers map[string]Notifier
	// RateLimits returns a project's per-client limits (counted in a
	// JetStream KV bucket shared by every process of the service); nil:
	// ratelimit.Defaults. Without NC (or Resolve) nothing is limited.
	RateLimits func(project string) ratelimit.Limits
	// ContentRules returns a project's Rail 2 rules for notifications;
	// nil (or a nil answer): rails.DefaultContentRules().
	ContentRules func(project string) []rails.ContentRule
	// OCTOSuppliers are the OCTO APIs atp_search_activities also searches
	// (source OCTO_BRIDGE); none: ATP-native activities only.
	OCTOSuppliers []*octo.Supplier
	// KeyDir holds the projects' mandate issuer keys (mandate.KeyDir;
	// default <DataDir>/keys, where utpmesh up keeps them): an approved
	// HEM-MANDATE-01 expansion signs its sub-mandate with the project's.
	KeyDir string
	// HEMCatalogue is the HEM catalogue; nil: hem.Default().
	HEMCatalogue *hem.Catalogue
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Notifier delivers one message to one address.
type Notifier interface {
	// Send delivers body to address and returns the provider's message
	// id ("" when it gives none).
	Send(ctx context.Context, m Message) (providerID string, err error)
}

// Message is one notification to deliver.
type Message struct {
	NotificationID string
	Channel        string
	To             string
	Body           string
	TemplateID     string
	BookingID      string
}

// DBPath is the bookings file an earlier version kept in dataDir.
func DBPath(dataDir string) string { return filepath.Join(dataDir, FileName) }

// StatePath is the local state's file in dataDir.
func StatePath(dataDir string) string { return filepath.Join(dataDir, StateFile) }

// Normalize checks d and fills its defaults.
func (d Deps) Normalize() (Deps, error) {
	if d.DataDir == "" {
		return d, errors.New("atp: no data directory: pass --data DIR (the service keeps its local files there)")
	}
	switch d.State {
	case "":
		d.State = StateJetStream
	case StateJetStream, StateBolt:
	default:
		return d, fmt.Errorf("atp: state %q: use %s (a KV bucket every worker shares) or %s (a local file, one worker)", d.State, StateJetStream, StateBolt)
	}
	if d.StateReplicas < 0 || d.StateReplicas > 5 || (d.State == StateBolt && d.StateReplicas > 1) {
		return d, fmt.Errorf("atp: %d state replicas: use 1, or 3 on a NATS cluster of at least three servers, with the %s state", d.StateReplicas, StateJetStream)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.KeyDir == "" {
		d.KeyDir = filepath.Join(d.DataDir, "keys")
	}
	if d.TickEvery == 0 {
		d.TickEvery = 10 * time.Second
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	d.Logger = d.Logger.With("service", "atp")
	return d, nil
}

// Conn returns NC and Cards, resolving them when they are nil.
func (d Deps) Conn(ctx context.Context) (*nats.Conn, cardstore.Store, error) {
	if d.NC != nil && d.Cards != nil {
		return d.NC, d.Cards, nil
	}
	if d.Resolve == nil {
		return nil, nil, errors.New("atp: no NATS connection or CardStore configured")
	}
	return d.Resolve(ctx)
}

// ErrNotReady: the ATP service of a data directory has not started yet,
// so no booking state is known.
var ErrNotReady = errors.New("atp: booking service not started")

// States is the booking-state provider of one data directory for the
// Cedar gate (mesh.AuthConfig.States). The gate may be configured before
// the service opens its file; the service sets the store when it does.
type States struct {
	mu    sync.Mutex
	store *booking.Store
}

var _ atpauthz.States = (*States)(nil)

var (
	statesMu sync.Mutex
	states   = map[string]*States{}
)

// StatesFor returns the provider of a data directory (one per absolute
// path, shared by the gate and the service in the same process).
func StatesFor(dataDir string) *States {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	statesMu.Lock()
	defer statesMu.Unlock()
	s, ok := states[abs]
	if !ok {
		s = &States{}
		states[abs] = s
	}
	return s
}

// Set provides the store (nil clears it, when the service closes).
func (s *States) Set(st *booking.Store) {
	s.mu.Lock()
	s.store = st
	s.mu.Unlock()
}

// BookingState implements atpauthz.States.
func (s *States) BookingState(ctx context.Context, project, id string) (string, error) {
	s.mu.Lock()
	st := s.store
	s.mu.Unlock()
	if st == nil {
		return "", fmt.Errorf("%w: the gate asked for booking %s before the atp service opened its data file", ErrNotReady, id)
	}
	return st.BookingState(ctx, project, id)
}
