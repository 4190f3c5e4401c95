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
)

// FileName is the service's bbolt file under the data directory.
const FileName = "atp.db"

// Deps are what the ATP service needs.
type Deps struct {
	// NC and Cards report atp_invoke_hem resolutions into the invoking
	// turn (a tool.result card and an inbox report). When nil, Resolve
	// provides them; without either, resolutions are only polled.
	NC    *nats.Conn
	Cards cardstore.Store
	// Resolve provides NC and Cards of a mesh started after the service.
	Resolve func(ctx context.Context) (*nats.Conn, cardstore.Store, error)
	// DataDir holds atp.db. Required.
	DataDir string
	// Context bounds the service's timeout loop and the life of its file;
	// nil: they live until the process exits.
	Context context.Context
	// Now is the clock (timeouts, event times); default time.Now.
	Now func() time.Time
	// TickEvery is how often state timeouts are applied; default 10s.
	// Negative: never (tests call Service.Tick).
	TickEvery time.Duration
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

// DBPath is the service's file in dataDir.
func DBPath(dataDir string) string { return filepath.Join(dataDir, FileName) }

// Normalize checks d and fills its defaults.
func (d Deps) Normalize() (Deps, error) {
	if d.DataDir == "" {
		return d, errors.New("atp: no data directory: pass --data DIR (the service keeps atp.db there)")
	}
	if d.Now == nil {
		d.Now = time.Now
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
