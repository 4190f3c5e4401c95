// Package admit is the mesh's admission service: a tool call reaches a
// worker only after the mesh authorized it. An agent runtime dispatches a
// call with one request on
//
//	cg.<ver>.<project>.<channel>.svc.dispatch.call.<agent token>
//
// (an operator on …svc.dispatch.operator.<name>); the service validates
// the call, checks that the body's agent_id is the subject's agent, looks
// the tool up, verifies the mandate and evaluates Cedar with the mesh's
// gate (authz.Gate), writes the tool.call card without the mandate
// (metadata keeps mandate_jti, mandate_sha256 and the decision), publishes
// the UTP command durably with the CG-Admission header (utp.SignAdmission,
// the mesh node's Ed25519 key) and answers utp.DispatchReply. A denied call
// gets its tool.call card and a failed auth_failed tool.result, reported to
// the inbox, so the agent is woken as for any result. Workers read the
// mesh's admission public keys on …svc.dispatch.keys.
//
// docs/protocol.md ("Admission") is the wire contract.
package admit

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// Errors of the admission service, with their wire codes (Codes).
var (
	// ErrInvalid: the dispatch request breaks a rule (bad_request); the
	// message names the field and what to send instead.
	ErrInvalid = errors.New("admit: invalid dispatch request")
	// ErrForbidden: the request's agent_id is not the agent its subject
	// names, an agent's begins utp.OperatorAgentPrefix, or an operator's
	// is not utp.OperatorAgentID of its name (forbidden).
	ErrForbidden = errors.New("admit: forbidden")
	// ErrUnknownTool: the tool is not registered in the project
	// (not_found).
	ErrUnknownTool = errors.New("admit: unknown tool")
	// ErrConflict: the call's tool_call_id was dispatched before with
	// other content (conflict).
	ErrConflict = errors.New("admit: conflicting dispatch")
	// ErrKey: the admission key file or the key set holds something that
	// is not a key.
	ErrKey = errors.New("admit: bad admission key")
	// ErrUnavailable: the call could not be admitted now (unavailable):
	// the node has no quorum (Config.Quorum; nothing is written), or the
	// command stream had no leader for Config.PublishBound or none could
	// be elected (the tool.call card is written). A retry with the same
	// tool_call_id is safe.
	ErrUnavailable = errors.New("admit: unavailable")
)

// Codes maps the service's sentinels to wire codes.
var Codes = svc.Codes{
	{Err: ErrInvalid, Code: svc.CodeBadRequest},
	{Err: ErrForbidden, Code: svc.CodeForbidden},
	{Err: ErrUnknownTool, Code: svc.CodeNotFound},
	{Err: ErrConflict, Code: svc.CodeConflict},
	{Err: ErrUnavailable, Code: svc.CodeUnavailable},
}

// Config configures the service.
type Config struct {
	// Version is the protocol version token; default subjects.DefaultVersion.
	Version string
	// Store is the CardStore the tool.call cards (and denials' results)
	// are written to. Required.
	Store cardstore.Store
	// Registry resolves tools. Required.
	Registry registry.Registry
	// Gate authorizes calls. Nil: no gate (a mesh without
	// mesh.Config.Auth): every call is admitted, with decision reason
	// "no_gate", and logged once.
	Gate *authz.Gate
	// Audit records the admission's own refusals (an operator-only tool
	// asked by an agent) as authz decisions; the gate audits its own.
	// Nil: they are only logged.
	Audit authz.Auditor
	// Key signs admissions. Required.
	Key *Key
	// Keys is the key set of every node; Start adds Key to it. Default a
	// LocalKeys.
	Keys KeySet
	// Logger; default slog.Default().
	Logger *slog.Logger
	// EntryTTL is how long a tool's registry entry is reused; default 5 s
	// (a registry change, e.g. options.principal, reaches admission within
	// it). Negative: read the registry on every call.
	EntryTTL time.Duration
	// Quorum tells whether the JetStream cluster can elect a leader for
	// the command stream now: nil, or an error saying why not (the node
	// reaches too few of its cluster's nodes; a single node's JetStream
	// stopped). A dispatch asks it first and fails at once with
	// ErrUnavailable when it errs; while a publish finds the stream
	// without a leader, the admission sends it again (publish.go) only
	// while Quorum returns nil. Nil: no check, and a publish is resent
	// until PublishBound.
	Quorum func() error
	// PublishBound bounds the resending of a command while its stream
	// has no leader; default DefaultPublishBound. The request's own
	// deadline bounds it too.
	PublishBound time.Duration
	// PublishBesideCard publishes a new admitted call's command while its
	// tool.call card is being committed, instead of after the commit, and
	// answers once both succeeded (beside.go): the agent waits for the
	// longer of the two writes, not their sum. A call whose card exists
	// (a resend, a conflict) and a denied call take the sequential path.
	// Store must be a CardAnnouncer (boltstore.Store is), else Start
	// fails. Set it only when every worker starts its calls on this very
	// store (the single-node CardStore, which natsstore serves to remote
	// workers): a replicated or remote store does not know this
	// process's Puts, and its workers would find commands without cards.
	PublishBesideCard bool
	// Outbox, when set, stores a new admitted call's tool.call card
	// together with its command m in one commit (a node's outbox,
	// boltstore.Store.PutWithCommand), instead of Store.Put: a command
	// stream that acknowledges before its fsync (streams.WithAsyncPersist)
	// may lose the command in a crash, and the node publishes it again
	// from the outbox. Requires PublishBesideCard.
	Outbox func(ctx context.Context, cc *card.Card, m *nats.Msg) error
}

// Service is a running admission service.
type Service struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream
	srv *svc.Server
	log *slog.Logger

	// announce is Store when Config.PublishBesideCard is set, else nil.
	announce CardAnnouncer

	mu      sync.Mutex
	entries map[string]cachedEntry   // "<project>/<tool>"
	own     map[string]struct{}      // signatures of commands this process admitted (Signed)
	fresh   map[string]chan struct{} // calls dispatched beside their cards now (beside.go), by card key
}

type cachedEntry struct {
	e  *registry.Entry
	at time.Time
}

// maxOwn bounds the signatures Signed remembers; past it they are
// forgotten (those commands are then verified by their signature).
const maxOwn = 16384

// Start adds the key to the key set and serves the dispatch subjects on nc.
func Start(ctx context.Context, nc *nats.Conn, cfg Config) (*Service, error) {
	if nc == nil || cfg.Store == nil || cfg.Registry == nil || cfg.Key == nil {
		return nil, errors.New("admit: Start needs a connection, Config.Store, Config.Registry and Config.Key")
	}
	var announce CardAnnouncer
	if cfg.PublishBesideCard {
		a, ok := cfg.Store.(CardAnnouncer)
		if !ok {
			return nil, fmt.Errorf("admit: Config.PublishBesideCard needs a Store that is a CardAnnouncer (the single-node boltstore); %T is not: leave PublishBesideCard off", cfg.Store)
		}
		announce = a
	}
	if cfg.Outbox != nil && !cfg.PublishBesideCard {
		return nil, errors.New("admit: Config.Outbox needs Config.PublishBesideCard (a new call's card and command are written side by side); set both or neither")
	}
	if cfg.Version == "" {
		cfg.Version = subjects.DefaultVersion
	}
	if cfg.Keys == nil {
		cfg.Keys = &LocalKeys{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.Keys.Add(ctx, cfg.Key.KeyID, cfg.Key.Public); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("admit: jetstream: %w", err)
	}
	if cfg.EntryTTL == 0 {
		cfg.EntryTTL = 5 * time.Second
	}
	if cfg.PublishBound <= 0 {
		cfg.PublishBound = DefaultPublishBound
	}
	s := &Service{cfg: cfg, nc: nc, js: js, log: cfg.Logger, entries: map[string]cachedEntry{}, own: map[string]struct{}{},
		fresh: map[string]chan struct{}{}}
	s.announce = announce
	if cfg.Gate == nil {
		s.log.Warn("admission without a gate: every dispatched call is admitted (mesh.Config.Auth is nil)")
	}
	s.srv, err = svc.NewServer(nc, svc.Config{Service: subjects.DispatchService, Version: cfg.Version, Codes: Codes, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	if err := s.srv.Serve(map[string]svc.HandlerFunc{subjects.DispatchKeysOp: s.keys}, s.dispatchTool); err != nil {
		return nil, err
	}
	return s, nil
}

// Stop stops serving.
func (s *Service) Stop(ctx context.Context) error { return s.srv.Stop(ctx) }

// KeyID is the key id of this node's admission key.
func (s *Service) KeyID() string { return s.cfg.Key.KeyID }

// Keys returns every node's admission public key by key id.
func (s *Service) Keys(ctx context.Context) (map[string]ed25519.PublicKey, error) {
	return s.cfg.Keys.All(ctx)
}

// Signed reports whether this process's admission signed the
// CG-Admission header value hdr, and forgets it: the mesh's own worker
// runtime then checks the header's fields without verifying the signature
// again (utp.CheckOwnAdmission). A redelivery is verified in full.
func (s *Service) Signed(hdr string) bool {
	_, sig, ok := strings.Cut(hdr, ".")
	if !ok {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok = s.own[sig]
	delete(s.own, sig)
	return ok
}

func (s *Service) remember(hdr string) {
	_, sig, _ := strings.Cut(hdr, ".")
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.own) >= maxOwn {
		clear(s.own)
	}
	s.own[sig] = struct{}{}
}

// registryEntry returns the registry entry of tool, reusing it for EntryTTL.
func (s *Service) registryEntry(ctx context.Context, project, tool string) (*registry.Entry, error) {
	key := project + "/" + tool
	if s.cfg.EntryTTL > 0 {
		s.mu.Lock()
		c, ok := s.entries[key]
		s.mu.Unlock()
		if ok && time.Since(c.at) < s.cfg.EntryTTL {
			return c.e, nil
		}
	}
	e, err := s.cfg.Registry.Get(ctx, project, tool)
	if err != nil || s.cfg.EntryTTL <= 0 {
		return e, err
	}
	s.mu.Lock()
	if len(s.entries) >= 4096 {
		clear(s.entries)
	}
	s.entries[key] = cachedEntry{e: e, at: time.Now()}
	s.mu.Unlock()
	return e, nil
}

// keys answers svc.dispatch.keys: every node's key and the project's
// commands mode.
func (s *Service) keys(ctx context.Context, sc svc.Scope, _ []byte) (any, error) {
	keys, err := s.cfg.Keys.All(ctx)
	if err != nil {
		return nil, err
	}
	mode := string(authz.CommandsRaw) // no gate: raw commands are as good as admitted ones
	if s.cfg.Gate != nil {
		pc, err := s.cfg.Gate.Config(ctx, sc.Project)
		if err != nil {
			return nil, fmt.Errorf("admit: config of %s: %w", sc.Project, err)
		}
		mode = string(authz.CommandsAdmitted)
		if pc.RawCommands() {
			mode = string(authz.CommandsRaw)
		}
	}
	return utp.AdmissionKeysReply{Keys: wireKeys(keys), Commands: mode}, nil
}

// dispatchTool routes svc.dispatch.call.<agent> and
// svc.dispatch.operator.<name>.
func (s *Service) dispatchTool(ctx context.Context, ts subjects.ToolSubject, data []byte) (any, error) {
	switch ts.Op {
	case subjects.DispatchCallOp:
		return s.dispatch(ctx, ts, utp.PrincipalAgent, data)
	case subjects.DispatchOperatorOp:
		return s.dispatch(ctx, ts, utp.PrincipalOperator, data)
	}
	return nil, fmt.Errorf("%w: op %q; use %s.<agent> or %s.<operator>", ErrInvalid, ts.Op, subjects.DispatchCallOp, subjects.DispatchOperatorOp)
}
