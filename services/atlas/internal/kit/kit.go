package kit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/internal/determ"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/boltstate"
	"github.com/utpmesh/utpmesh/services/state/holder"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// Errors of the kit.
var (
	// ErrClosed: the service's data file is closed.
	ErrClosed = errors.New("atlas: service closed")
	// ErrNotPending: a confirmation id names nothing pending (unknown,
	// already used or expired). Its message says which.
	ErrNotPending = errors.New("atlas: confirmation not pending")
	// ErrStateHeld: another process serves the group's local (bbolt)
	// state; its message names the holder and says what to do. It is
	// holder.ErrHeld, the state engine's.
	ErrStateHeld = holder.ErrHeld
)

// Outcome is what a Spec's Run returns.
type Outcome struct {
	// Result is the tool's result (a struct or map encoding to an object).
	Result any
	// Undo is the undo step of a mutating call; nil when not undoable.
	Undo *receipts.Undo
	// Changes lists what the call created, updated or deleted.
	Changes []receipts.Change
	// Warnings are noted in the receipt.
	Warnings []string
	// After runs once the transaction has committed; its error fails the
	// call (the message must say the change itself was applied).
	After func(ctx context.Context) error
}

// Spec is one ATLAS tool.
type Spec struct {
	Name        string
	Description string
	// Params is the JSON Schema of the arguments.
	Params string
	// Risk and Confirmation are registered as options (the seed's risk
	// level and confirmation rule); Confirmation is also enforced here.
	Risk         registry.RiskLevel
	Confirmation registry.Confirmation
	// Count returns how many objects a call acts on (for when_multiple).
	Count func(args json.RawMessage) int
	// ReadOnly tools run in a read transaction, keep no idempotency record
	// and carry no undo key.
	ReadOnly bool
	// Plan (tools that can need confirmation) checks the arguments against
	// the data in a read transaction and returns what would happen.
	Plan func(x *Exec) (any, error)
	// Run executes the call in x.Tx.
	Run func(x *Exec) (Outcome, error)
	// Direct, instead of Run, executes without a transaction (x.Tx is nil)
	// and without an idempotency record: for tools whose effect lives
	// elsewhere (ATLAS_CONFIRM, ATLAS_CANCEL).
	Direct func(ctx context.Context, x *Exec) (Outcome, error)
}

// Exec is one execution of a Spec.
type Exec struct {
	// Tx is the transaction (nil for Direct).
	Tx state.Tx
	// Project, Channel and Version scope the call.
	Project, Channel, Version string
	// ToolCallID is the call the ids derive from (for a confirmed call,
	// the original call's).
	ToolCallID  string
	AgentTurnID string
	AgentID     string
	// Time is the call's time (determ.Time of its tool.call card).
	Time time.Time
	// Args are the validated arguments.
	Args json.RawMessage
	// Call is the worker call (nil when a confirmation executes the Spec).
	Call *worker.Call
	// Svc is the service.
	Svc *Service
}

// ID derives the index-th id of this call with a type prefix.
func (x *Exec) ID(prefix string, index int) string {
	return determ.ID(prefix, x.Project, x.ToolCallID, index)
}

// Now is the call's time as an ATLAS timestamp.
func (x *Exec) Now() string { return determ.Format(x.Time) }

// Bind decodes the arguments; a mismatch is bad_request.
func (x *Exec) Bind(v any) error { return toolkit.Bind(x.Args, v) }

// Bucket returns the call's project's bucket of a name (created by its
// first write).
func (x *Exec) Bucket(name string) state.Bucket { return x.Tx.Bucket(x.Project, name) }

// Service is one ATLAS group's running service.
type Service struct {
	group string
	deps  atlas.Deps
	st    state.Store
	log   *slog.Logger
	specs map[string]*Spec

	mu     sync.Mutex
	srv    *svc.Server
	closed bool
	done   chan struct{}
	// refused is set when the service may not serve its local state
	// (another process holds it); every call then fails with it.
	refused error
	holder  *holder.Held
}

// New opens the group's state: the local bbolt file <DataDir>/atlas-
// <group>.db (deps.State bolt, the default), guarded by a holder lease in
// the CardStore so that a second process serving the group elsewhere is
// refused (lease.go); or the JetStream KV bucket atlas_<group> that every
// worker of the group shares (deps.State jetstream). When deps.Context is
// set the state is closed (and the confirmation endpoint stopped) when it
// ends.
func New(group string, deps atlas.Deps) (*Service, error) {
	deps, err := deps.Normalize(group)
	if err != nil {
		return nil, err
	}
	s := &Service{group: group, deps: deps, log: deps.Logger, specs: map[string]*Spec{}, done: make(chan struct{})}
	switch deps.State {
	case atlas.StateJetStream:
		kv := &lazyKV{deps: deps, group: group, cfg: kvstate.Config{Bucket: atlas.KVBucket(group), Replicas: deps.StateReplicas,
			Description: "ATLAS atlas." + group + " state (utpmesh)"}}
		if deps.NC != nil {
			if err := kv.openNow(); err != nil {
				return nil, fmt.Errorf("atlas.%s: replicated state: %w", group, err)
			}
		}
		s.st = kv
	default:
		if err := os.MkdirAll(deps.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("atlas.%s: data directory: %w", group, err)
		}
		path := atlas.DBPath(deps.DataDir, group)
		bs, err := boltstate.Open(path, 0)
		if err != nil {
			return nil, fmt.Errorf("atlas.%s: open %s: %w (is another atlas.%s process using this data directory?)", group, path, err, group)
		}
		s.st = bs
		if err := s.holdLocal(); err != nil {
			_ = bs.Close()
			return nil, err
		}
	}
	ctx := deps.Context
	if ctx != nil {
		go func() {
			select {
			case <-ctx.Done():
				_ = s.Close()
			case <-s.done:
			}
		}()
	} else {
		ctx = context.Background()
	}
	go s.purgeLoop(ctx, deps.PurgeEvery)
	return s, nil
}

// Group is the service's group name.
func (s *Service) Group() string { return s.group }

// State is the service's state.
func (s *Service) State() state.Store { return s.st }

// Deps are the service's normalized dependencies.
func (s *Service) Deps() atlas.Deps { return s.deps }

// Logger is the service's logger.
func (s *Service) Logger() *slog.Logger { return s.log }

// Author is the author_id of the cards the service writes.
func (s *Service) Author() string { return "atlas." + s.group }

// Done is closed when the service closes.
func (s *Service) Done() <-chan struct{} { return s.done }

// Close stops the confirmation endpoint, closes the state and gives up the
// holder lease of a local state. It is idempotent.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	srv, h := s.srv, s.holder
	close(s.done)
	s.mu.Unlock()
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = srv.Stop(ctx)
		cancel()
	}
	err := s.st.Close()
	if h != nil {
		h.Release()
	}
	return err
}

// Tools returns the worker tools of the specs, each on target
// atlas.<group>.<NAME>, and starts the confirmation endpoint when a spec
// can need confirmation.
func (s *Service) Tools(specs ...Spec) ([]worker.Tool, error) {
	out := make([]worker.Tool, 0, len(specs))
	confirmable := false
	for i := range specs {
		sp := &specs[i]
		if (sp.Run == nil) == (sp.Direct == nil) {
			return nil, fmt.Errorf("atlas.%s: tool %s needs exactly one of Run and Direct", s.group, sp.Name)
		}
		if toolkit.Confirmable(sp.Confirmation) {
			if sp.Plan == nil || sp.Run == nil {
				return nil, fmt.Errorf("atlas.%s: tool %s needs confirmation, so it needs Plan and Run", s.group, sp.Name)
			}
			confirmable = true
		}
		s.specs[sp.Name] = sp
		conf := sp.Confirmation
		if conf == "" {
			conf = registry.ConfirmNever
		}
		ts := toolkit.Spec{Name: sp.Name, Description: sp.Description, Params: sp.Params,
			Target: "atlas." + s.group + "." + sp.Name, AfterExecution: card.Suspend,
			CedarAction: `ATLASAction::"` + sp.Name + `"`, Risk: sp.Risk, Confirmation: conf}
		t, err := ts.Tool(s.handler(sp), toolkit.Hooks{})
		if err != nil {
			return nil, fmt.Errorf("atlas.%s: %w", s.group, err)
		}
		out = append(out, t)
	}
	if confirmable {
		go s.serveConfirmations()
	}
	return out, nil
}

// Build is the catalogue factory of a group: it opens the group's service
// with open and returns its tools. The service stays open for the life of
// the process (its Deps.Context closes it).
func Build[S interface{ Tools() []worker.Tool }](open func(atlas.Deps) (S, error), deps atlas.Deps) ([]worker.Tool, error) {
	s, err := open(deps)
	if err != nil {
		return nil, err
	}
	return s.Tools(), nil
}
