package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/atp/hem"
	"github.com/utpmesh/utpmesh/services/atp/rails"
	"github.com/utpmesh/utpmesh/services/atp/ratelimit"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// Error codes of the ATP tools (UTP codes are extensible).
const (
	// CodeWrongState: the booking is not in a state the tool accepts.
	CodeWrongState card.ErrorCode = "atp_wrong_state"
	// CodeIllegalTransition: the state machine refuses the move.
	CodeIllegalTransition card.ErrorCode = "atp_illegal_transition"
	// CodeHEMActive: a HEM escalation holds the booking.
	CodeHEMActive card.ErrorCode = "atp_hem_active"
	// CodeGuardrail: a rail (rails.Rail1, rails.Rail2) blocked the call.
	CodeGuardrail card.ErrorCode = "atp_guardrail"
	// CodeRateLimited: the client is over a rate limit; the detail's
	// retry_after_seconds says when to call again.
	CodeRateLimited card.ErrorCode = "rate_limited"
)

// Scopes (seed MCP-D4: normative names only).
const (
	ScopeContextRead      = "CONTEXT_READ"
	ScopeNotificationSend = "NOTIFICATION_SEND"
	ScopePreArrangement   = "PRE_ARRANGEMENT_WRITE"
	ScopeHEMInvoke        = "HEM_INVOKE"
	ScopeSafetyWrite      = "SAFETY_WRITE"
	ScopeBookingRead      = "BOOKING_READ"
	ScopeBookingAdmin     = "BOOKING_ADMIN"
)

// RetiredScopes maps the retired informal scope names (MCP-D4) to their
// normative names.
var RetiredScopes = map[string]string{"JOURNEY_READ": ScopeContextRead, "NOTIFY": ScopeNotificationSend}

// CheckScope refuses a retired or unknown scope name, saying which to use.
func CheckScope(name string) error {
	if n, ok := RetiredScopes[name]; ok {
		return fmt.Errorf("scope %s was retired by decision MCP-D4; use %s", name, n)
	}
	switch name {
	case ScopeContextRead, ScopeNotificationSend, ScopePreArrangement, ScopeHEMInvoke, ScopeSafetyWrite, ScopeBookingRead, ScopeBookingAdmin, ScopeHEMOperator:
		return nil
	}
	return fmt.Errorf("unknown ATP scope %q; use one of CONTEXT_READ, NOTIFICATION_SEND, PRE_ARRANGEMENT_WRITE, HEM_INVOKE, SAFETY_WRITE, BOOKING_READ, BOOKING_ADMIN, HEM_OPERATOR", name)
}

// Service is the running ATP service.
type Service struct {
	deps  atp.Deps
	store *booking.Store
	hem   *hem.Manager
	done  chan struct{}

	limMu   sync.Mutex
	limiter *ratelimit.Limiter
}

// Open opens the service's state (openState), hands it to the gate's state provider of
// the data directory (atp.StatesFor) and starts the timeout loop. When
// deps.Context ends both stop and the file is closed.
func Open(deps atp.Deps) (*Service, error) {
	deps, err := deps.Normalize()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(deps.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("atp: data directory: %w", err)
	}
	engine, err := openState(deps)
	if err != nil {
		return nil, err
	}
	s := &Service{deps: deps, done: make(chan struct{})}
	st := booking.New(engine, booking.Options{Now: deps.Now, Committed: s.publishTransitions})
	s.store = st
	cat := deps.HEMCatalogue
	if cat == nil {
		cat = hem.Default()
	}
	s.hem = hem.NewManager(st, cat, s.wake)
	atp.StatesFor(deps.DataDir).Set(st)
	register(deps.DataDir, s)
	ctx := deps.Context
	if ctx == nil {
		ctx = context.Background()
	}
	go s.loop(ctx)
	go s.purgeLoop(ctx, deps.PurgeEvery)
	return s, nil
}

func (s *Service) loop(ctx context.Context) {
	defer func() {
		atp.StatesFor(s.deps.DataDir).Set(nil)
		register(s.deps.DataDir, nil)
		_ = s.store.Close()
		close(s.done)
	}()
	if s.deps.TickEvery < 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(s.deps.TickEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Tick(ctx)
		}
	}
}

// Tick applies what the clock decides: HEM tasks past their
// protocol_deadline take their secondary path (and unreported
// resolutions are reported), then state timeouts fire. The service's
// loop calls it every Deps.TickEvery; tests call it after moving the
// clock.
func (s *Service) Tick(ctx context.Context) {
	expired, err := s.hem.Expire(ctx)
	if err != nil && ctx.Err() == nil {
		s.deps.Logger.Warn("atp: HEM deadlines", "err", err)
	}
	for _, t := range expired {
		s.deps.Logger.Info("atp: HEM deadline passed, secondary path taken", "project", t.Project, "task", t.TaskID, "hem_id", t.HEMID, "status", t.Status)
	}
	fired, err := s.store.Tick(ctx)
	if err != nil && ctx.Err() == nil {
		s.deps.Logger.Warn("atp: state timeouts", "err", err)
	}
	for _, f := range fired {
		s.deps.Logger.Info("atp: state timed out", "project", f.Project, "booking", f.BookingID, "from", f.From, "to", f.To)
	}
}

// HEM is the service's HEM task manager.
func (s *Service) HEM() *hem.Manager { return s.hem }

var (
	openMu sync.Mutex
	opened = map[string]*Service{}
)

func absDir(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}

func register(dir string, s *Service) {
	openMu.Lock()
	defer openMu.Unlock()
	if s == nil {
		delete(opened, absDir(dir))
		return
	}
	opened[absDir(dir)] = s
}

// ServiceFor returns the service open on a data directory in this process,
// or nil (utpmesh up loads its demo fixture through it).
func ServiceFor(dataDir string) *Service {
	openMu.Lock()
	defer openMu.Unlock()
	return opened[absDir(dataDir)]
}

// Done is closed once the service has closed its file.
func (s *Service) Done() <-chan struct{} { return s.done }

// Store is the service's booking store.
func (s *Service) Store() *booking.Store { return s.store }

// Build is the catalogue factory: it opens the service and returns its
// tools.
func Build(deps atp.Deps) ([]worker.Tool, error) {
	s, err := Open(deps)
	if err != nil {
		return nil, err
	}
	return s.Tools()
}

// spec is one tool before it becomes a toolkit.Spec.
type spec struct {
	name, desc, params, action, scope string
	risk                              registry.RiskLevel
	// operator makes the tool operator-only (registry options.principal
	// operator); its handler also refuses any other principal
	// (operatorOnly).
	operator bool
	// writes marks a tool that changes the service's state: it runs
	// exactly once per call (once), and its run names its result with
	// setResult before its write.
	writes bool
	run    func(ctx context.Context, c *worker.Call) (any, error)
}

// Tools returns the service's tools: toolkit specs (target atp.<name>,
// the tool's Cedar action and scope) behind two guards, operator-only
// tools first, then the client's rate limits.
func (s *Service) Tools() ([]worker.Tool, error) {
	specs := append(append(s.seedTools(), s.hemTools()...), s.adminTools()...)
	defs := make([]toolkit.Def, 0, len(specs))
	for _, sp := range specs {
		if err := CheckScope(sp.scope); err != nil {
			return nil, fmt.Errorf("atp: tool %s: %w", sp.name, err)
		}
		run := sp.run
		if sp.writes {
			run = s.once(run)
		}
		defs = append(defs, toolkit.Def{
			Spec: toolkit.Spec{Name: sp.name, Description: sp.desc, Params: sp.params, Target: "atp." + sp.name,
				CedarAction: sp.action, Scopes: []string{sp.scope}, Risk: sp.risk, Operator: sp.operator},
			Run: toolkit.Value(func(ctx context.Context, c *worker.Call) (any, error) {
				v, err := run(ctx, c)
				if err != nil {
					return nil, mapErr(err)
				}
				return v, nil
			}),
		})
	}
	tools, err := toolkit.Tools(toolkit.Hooks{Guards: []toolkit.Guard{registeredScopes, operatorOnly, s.rateLimit}}, defs...)
	if err != nil {
		return nil, fmt.Errorf("atp: %w", err)
	}
	return tools, nil
}

// registeredScopes is the guard that checks the scopes a call's registry
// entry carries (options.scopes, where scopes enter the mesh: an entry
// re-registered by hand may carry any): a retired or unknown name
// (tools.CheckScope, MCP-D4) fails the call, saying which name to use.
func registeredScopes(_ context.Context, _ *toolkit.Spec, c *worker.Call) error {
	if c.Entry == nil {
		return nil
	}
	for _, sc := range c.Entry.Options.Scopes {
		if err := CheckScope(sc); err != nil {
			return worker.Fail(card.CodeBadRequest, fmt.Sprintf("the registry entry of %s in project %s has options.scopes %q: %v; re-register it with the normative name (utpmesh tools put)", c.ToolName, c.ProjectID, sc, err))
		}
	}
	return nil
}

// operatorOnly is the guard of the operator-only tools: it refuses every
// caller but an operator the mesh admitted (defence in depth behind the
// admission's options.principal).
func operatorOnly(_ context.Context, sp *toolkit.Spec, c *worker.Call) error {
	if !sp.Operator {
		return nil
	}
	_, err := operatorOf(c)
	return err
}

// rateLimit is the guard that counts a call against its client's limits.
func (s *Service) rateLimit(ctx context.Context, _ *toolkit.Spec, c *worker.Call) error {
	return s.limit(ctx, c)
}

// RateLimitDetail is the detail of a rate_limited failure.
type RateLimitDetail struct {
	ATPErrorCode      string `json:"atp_error_code"`
	Limit             string `json:"limit"`
	Max               int    `json:"max"`
	Window            string `json:"window"`
	RetryAfterSeconds int    `json:"retry_after_seconds"`
}

// limit counts the call against its client's limits (the calling
// agent_id in the call's project).
func (s *Service) limit(ctx context.Context, c *worker.Call) error {
	if s.deps.NC == nil && s.deps.Resolve == nil {
		return nil
	}
	s.limMu.Lock()
	l := s.limiter
	if l == nil {
		nc, _, err := s.deps.Conn(ctx)
		if err == nil {
			var js jetstream.JetStream
			if js, err = jetstream.New(nc); err == nil {
				l, err = ratelimit.New(ctx, js, ratelimit.Config{Now: s.deps.Now, Limits: s.deps.RateLimits})
			}
		}
		if err != nil {
			s.limMu.Unlock()
			return worker.Fail(card.CodeUpstreamUnavailable, "atp: the rate-limit counters are not reachable: "+err.Error()+"; call again")
		}
		s.limiter = l
	}
	s.limMu.Unlock()
	kind := ratelimit.KindCall
	switch c.ToolName {
	case ToolInvokeHEM:
		kind = ratelimit.KindHEM
	case ToolNotifyTraveller:
		kind = ratelimit.KindNotification
	}
	err := l.Allow(ctx, c.ProjectID, c.Command.AgentID, kind)
	var lim *ratelimit.Limited
	if errors.As(err, &lim) {
		return worker.FailDetail(CodeRateLimited, fmt.Sprintf("agent %s is over the ATP rate limit of %d %s per %s in project %s; retry after %d s",
			c.Command.AgentID, lim.Max, map[string]string{"calls_per_minute": "tool calls", "hem_per_hour": "atp_invoke_hem calls", "notifications_per_hour": "notifications"}[lim.Limit],
			lim.Window, c.ProjectID, lim.RetryAfterSeconds),
			RateLimitDetail{ATPErrorCode: "MCP-429-RATE", Limit: lim.Limit, Max: lim.Max, Window: lim.Window, RetryAfterSeconds: lim.RetryAfterSeconds})
	}
	if err != nil {
		if r := retryable(ctx, c, err); errors.Is(r, worker.ErrRetryLater) {
			return r // the counters' bucket is failing over: count the call when it answers
		}
		return worker.Fail(card.CodeUpstreamUnavailable, "atp: rate-limit check failed: "+err.Error()+"; call again")
	}
	return nil
}

// mapErr turns booking errors into tool failures.
func mapErr(err error) error {
	var ce *card.Error
	var rv *rails.Violation
	switch {
	case errors.As(err, &ce):
		return ce
	case errors.As(err, &rv):
		return worker.FailDetail(CodeGuardrail, rv.Error()+"; the attempt is in the booking's log for operators",
			map[string]string{"atp_error_code": "MCP-422-GUARDRAIL", "rail": rv.Rail, "rule_id": rv.RuleID})
	case errors.Is(err, booking.ErrNotFound):
		return worker.FailDetail(card.CodeBadRequest, err.Error(), map[string]string{"atp_error_code": "MCP-404-BOOKING"})
	case errors.Is(err, booking.ErrBadInput):
		return worker.Fail(card.CodeBadRequest, err.Error())
	case errors.Is(err, booking.ErrIllegalTransition):
		return worker.FailDetail(CodeIllegalTransition, err.Error(), map[string]string{"atp_error_code": "INVALID_TRANSITION"})
	case errors.Is(err, booking.ErrHEMActive):
		return worker.FailDetail(CodeHEMActive, err.Error(), map[string]string{"atp_error_code": "MCP-409-HEM"})
	case errors.Is(err, booking.ErrSuspended):
		return worker.FailDetail(CodeWrongState, err.Error(), map[string]string{"atp_error_code": "MCP-409-STATE", "booking_state": string(booking.Suspended)})
	case errors.Is(err, booking.ErrClosed):
		return worker.Fail(card.CodeUpstreamUnavailable, "atp: the booking store is closed (the service is stopping); call again")
	}
	return err
}

// WrongStateDetail is the detail of an atp_wrong_state failure.
type WrongStateDetail struct {
	ATPErrorCode   string   `json:"atp_error_code"`
	RequiredStates []string `json:"required_states"`
	BookingState   string   `json:"booking_state"`
}

// needState fails unless the booking's tool state is one of required.
func needState(tool string, b *booking.Booking, required ...string) error {
	st := b.ToolState()
	if slices.Contains(required, st) {
		return nil
	}
	return wrongState(tool, b, required)
}

func wrongState(tool string, b *booking.Booking, required []string) error {
	return worker.FailDetail(CodeWrongState, fmt.Sprintf("%s needs booking %s in %s; it is in %s", tool, b.ID, strings.Join(required, " or "), b.ToolState()),
		WrongStateDetail{ATPErrorCode: "MCP-409-STATE", RequiredStates: required, BookingState: b.ToolState()})
}

// postConfirmation lists the tool states after confirmation.
var postConfirmation = []string{booking.ToolPreJourney, string(booking.Amendment), string(booking.DisruptionReview),
	string(booking.PartyUnresponsive), booking.ToolJourney, string(booking.Completion)}

// needPostConfirmation fails unless the booking is past confirmation
// (suspension keeps the underlying state's answer).
func needPostConfirmation(tool string, b *booking.Booking) error {
	if b.State.PostConfirmation() {
		return nil
	}
	return wrongState(tool, b, []string{"any post-CONFIRMATION state (" + strings.Join(postConfirmation, ", ") + ")"})
}

// bind decodes the call's arguments.
func bind(c *worker.Call, v any) error { return c.Bind(v) }

// callID is a stable id of a call's effect, derived from its turn and
// tool_call_id, so a redelivered call names the same effect.
func callID(prefix string, c *worker.Call) string {
	sum := sha256.Sum256([]byte(c.ProjectID + "\x00" + c.Command.AgentTurnID + "\x00" + c.Command.ToolCallID))
	return prefix + "_" + hex.EncodeToString(sum[:10])
}
