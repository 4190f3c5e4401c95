package authz

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	"github.com/cedar-policy/cedar-go/x/exp/ast"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/subjects"
)

// MetadataMandate is the tool.call card metadata key that carries the
// mandate (a JSON string holding the compact token). pkg/agent writes it.
const MetadataMandate = "mandate"

// GateConfig configures a Gate.
type GateConfig struct {
	// Policies is where projects' policy sets and configs are read. Required.
	Policies PolicySource
	// Keys resolves mandate issuers' keys. Required.
	Keys mandate.KeyResolver
	// Resources resolve a call's resource and catalogue context
	// attributes (the catalogues' entity loaders, asked in order);
	// optional: without, the registered catalogues are asked.
	Resources []ResourceResolver
	// Audit receives every decision; optional.
	Audit Auditor
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
	// CacheSize bounds the verified-mandate cache; default 4096.
	CacheSize int
}

// Gate authorizes tool calls: it verifies the call's mandate and evaluates
// the project's and the mandate's Cedar policies. It is a worker.Authorizer.
type Gate struct {
	cfg      GateConfig
	verifier *mandate.Verifier

	mu       sync.Mutex
	mandates map[string]cachedMandate
	projects map[string]cachedPolicies
}

var _ worker.Authorizer = (*Gate)(nil)

type cachedMandate struct {
	m   *mandate.Mandate
	pub ed25519.PublicKey
}

type cachedPolicies struct {
	version uint64
	sha     string
	ps      *cedar.PolicySet
}

// NewGate returns a gate.
func NewGate(cfg GateConfig) (*Gate, error) {
	if cfg.Policies == nil || cfg.Keys == nil {
		return nil, fmt.Errorf("%w: GateConfig needs Policies and Keys", ErrInvalidRequest)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = 4096
	}
	return &Gate{
		cfg:      cfg,
		verifier: &mandate.Verifier{Keys: cfg.Keys, Now: cfg.Now},
		mandates: map[string]cachedMandate{},
		projects: map[string]cachedPolicies{},
	}, nil
}

// Request is one authorization question.
type Request struct {
	Version, Project, Channel string
	AgentID                   string
	ToolName                  string
	ToolCallID                string
	// Action is the tool's Cedar action (ActionOf).
	Action types.EntityUID
	// Scopes are the tool's required scopes (registry options.scopes).
	Scopes []string
	// Arguments are the call's arguments; the catalogues' resolvers read
	// them.
	Arguments json.RawMessage
	// Mandate is the compact token, or "".
	Mandate string
	// Operator, when set, is the name of the operator making the call
	// (admission's svc.dispatch.operator.<name>): the principal is
	// Operator::"<name>", no mandate is needed or read, and the project's
	// policies alone decide.
	Operator string
	// Builtin: a PMO built-in needs a valid mandate (unless the project
	// opted out) but no Cedar permission.
	Builtin bool
	// State, when set, is the resource's state to use instead of the
	// catalogue's own (policy tests; ResourceRequest.State).
	State *string
}

// Decision is the gate's answer.
type Decision struct {
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Action  string `json:"action"`
	// Policies determined the decision ("project:<id>", "mandate:<id>").
	Policies      []string `json:"policies"`
	MandateJTI    string   `json:"mandate_jti,omitempty"`
	MandateIssuer string   `json:"mandate_issuer,omitempty"`
	// ResourceID is the call's resource as a catalogue resolved it, else
	// the mandate's bound resource (wire: booking_object_id).
	ResourceID string `json:"booking_object_id,omitempty"`
	// ResourceState is the resource's state (wire: booking_state).
	ResourceState string `json:"booking_state,omitempty"`
	// Granted summarises what the mandate permits (on a scope violation).
	Granted []string `json:"granted,omitempty"`
	// Errors are Cedar evaluation errors of policies that did not apply.
	// An erring permit is skipped; an erring forbid denies the call
	// (fail closed: Reason project_policy_denied or
	// mandate_scope_violation, Policies naming the forbid).
	Errors []string `json:"errors,omitempty"`

	mandate *mandate.Mandate
}

// Mandate returns the verified mandate the decision used, or nil.
func (d *Decision) Mandate() *mandate.Mandate { return d.mandate }

// AuthFailedDetail is the detail of an auth_failed tool.result.
type AuthFailedDetail struct {
	// Reason is one of the Reason* constants (mandate_scope_violation…).
	Reason         string   `json:"reason"`
	Tool           string   `json:"tool"`
	RequiredAction string   `json:"required_action"`
	RequiredScopes []string `json:"required_scopes"`
	Granted        []string `json:"granted"`
	MandateJTI     string   `json:"mandate_jti,omitempty"`
	// ResourceID is Decision.ResourceID (wire: booking_object_id).
	ResourceID string   `json:"booking_object_id,omitempty"`
	Policies   []string `json:"policies"`

	// Fields a catalogue's DenialDecorator sets for its own actions (the
	// ATP catalogue's denial body, issue 13: error, required_scope,
	// mandate_scopes, atp_error_code).
	Error         string   `json:"error,omitempty"`
	RequiredScope string   `json:"required_scope,omitempty"`
	MandateScopes []string `json:"mandate_scopes,omitempty"`
	ATPErrorCode  string   `json:"atp_error_code,omitempty"`
}

// Authorize implements worker.Authorizer.
func (g *Gate) Authorize(ctx context.Context, call *worker.Call) error {
	req, err := RequestFromCall(call)
	if err != nil {
		return worker.Fail(card.CodeAuthFailed, err.Error())
	}
	d, err := g.DecideAudited(ctx, req)
	if err != nil {
		return err
	}
	if d.Allowed {
		return nil
	}
	return worker.FailDetail(card.CodeAuthFailed, d.Message, g.DenialDetail(req, d))
}

// DecideAudited is Decide followed by the decision's audit record: what a
// call's authorization (the worker's Authorize, the mesh's admission)
// does.
func (g *Gate) DecideAudited(ctx context.Context, req *Request) (*Decision, error) {
	d, err := g.Decide(ctx, req)
	if err != nil {
		return nil, err
	}
	g.audit(ctx, req, d)
	return d, nil
}

// DenialDetail is the detail of the auth_failed result of a denied call:
// the decision's reason, action, scopes, grants and policies, decorated by
// the catalogues' DenialDecorators.
func (g *Gate) DenialDetail(req *Request, d *Decision) AuthFailedDetail {
	detail := AuthFailedDetail{
		Reason: d.Reason, Tool: req.ToolName, RequiredAction: d.Action, RequiredScopes: nonNil(req.Scopes),
		Granted: nonNil(d.Granted), MandateJTI: d.MandateJTI, ResourceID: d.ResourceID, Policies: nonNil(d.Policies),
	}
	for _, r := range resolvers(g.cfg.Resources) {
		if dd, ok := r.(DenialDecorator); ok {
			dd.DecorateDenial(&detail)
		}
	}
	return detail
}

// Config returns the project's authorization configuration from the
// gate's policy source.
func (g *Gate) Config(ctx context.Context, project string) (ProjectConfig, error) {
	return g.cfg.Policies.Config(ctx, project)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// RequestFromCall builds the Request of a worker call.
func RequestFromCall(call *worker.Call) (*Request, error) {
	action, err := ActionOf(call.Entry)
	if err != nil {
		return nil, err
	}
	req := &Request{
		Version: call.Version, Project: call.ProjectID, Channel: call.ChannelID,
		AgentID: call.Command.AgentID, ToolName: call.ToolName, ToolCallID: call.Command.ToolCallID,
		Action: action, Arguments: call.Arguments, Builtin: call.Builtin,
	}
	if call.Entry != nil {
		req.Scopes = call.Entry.Options.Scopes
	}
	if call.CallCard != nil {
		if raw, ok := call.CallCard.Metadata.Extra[MetadataMandate]; ok {
			if err := json.Unmarshal(raw, &req.Mandate); err != nil {
				return nil, fmt.Errorf("tool.call metadata.mandate is not a JSON string holding the token: %v", err)
			}
		}
	}
	return req, nil
}

func deny(d *Decision, reason, msg string) *Decision {
	d.Allowed, d.Reason, d.Message = false, reason, msg
	return d
}

// Decide answers req. An error means the gate could not decide (the
// policy store failed); a denial is a Decision with Allowed false.
func (g *Gate) Decide(ctx context.Context, req *Request) (*Decision, error) {
	d := &Decision{Action: req.Action.String()}
	cfg, err := g.cfg.Policies.Config(ctx, req.Project)
	if err != nil {
		return nil, fmt.Errorf("authz: config of %s: %w", req.Project, err)
	}
	var m *mandate.Mandate
	if req.Operator != "" {
		if req.Builtin {
			d.Allowed, d.Reason, d.Message = true, ReasonOperator, "built-in: an operator's call, no Cedar action"
			return d, nil
		}
	} else if req.Mandate != "" {
		m, err = g.verify(ctx, req.Mandate, mandate.IssuerName(req.Project))
		if err != nil {
			if !IsMandateError(err) && ctx.Err() == nil {
				return nil, fmt.Errorf("authz: verify mandate: %w", err)
			}
			return deny(d, ReasonMandateInvalid, "mandate refused: "+err.Error()), nil
		}
		d.mandate, d.MandateJTI, d.MandateIssuer = m, m.Claims.JTI, m.Claims.Issuer
		if m.Claims.Subject != req.AgentID {
			return deny(d, ReasonSubjectMismatch, fmt.Sprintf("mandate %s is for agent %q, the call comes from agent %q", m.Claims.JTI, m.Claims.Subject, req.AgentID)), nil
		}
	} else if cfg.Required() {
		return deny(d, ReasonMandateMissing, fmt.Sprintf("project %s requires a mandate: pass one with the call (agent.Config.Mandate or CallRequest.Mandate; a raw command carries it in the tool.call card's metadata.mandate)", req.Project)), nil
	}
	if req.Builtin {
		d.Allowed, d.Reason, d.Message = true, ReasonBuiltinAuthorized, "built-in: mandate verified, no Cedar action"
		if m == nil {
			d.Reason, d.Message = ReasonMandateNotRequired, "built-in: project requires no mandate"
		}
		return d, nil
	}
	rr := ResourceRequest{Project: req.Project, Tool: req.ToolName, Action: req.Action, Arguments: req.Arguments, State: req.State}
	if m != nil {
		rr.Bound, rr.MandateJTI = m.Claims.Resource, m.Claims.JTI
	}
	res, err := resolve(ctx, resolvers(g.cfg.Resources), rr)
	if errors.Is(err, ErrBindingMismatch) {
		if rr.Bound != nil {
			d.ResourceID = *rr.Bound
		}
		return deny(d, ReasonResourceMismatch, strings.TrimPrefix(err.Error(), ErrBindingMismatch.Error()+": ")), nil
	}
	if err != nil {
		return nil, fmt.Errorf("authz: resource of the call: %w", err)
	}
	if res != nil {
		d.ResourceID, d.ResourceState = res.ID, res.State
	} else if rr.Bound != nil {
		d.ResourceID = *rr.Bound
	}
	doc, err := g.cfg.Policies.Policies(ctx, req.Project)
	if errors.Is(err, ErrNotFound) {
		return deny(d, ReasonNoProjectPolicy, fmt.Sprintf("project %s has no policy set: put one (utpmesh policy put --project %s FILE); the default is deny", req.Project, req.Project)), nil
	}
	if err != nil {
		return nil, fmt.Errorf("authz: policies of %s: %w", req.Project, err)
	}
	pps, err := g.projectPolicies(doc)
	if err != nil {
		return nil, err
	}
	env := EnvFor(req.AgentID, req.Project, req.Action, req.ToolName, req.Scopes, res)
	env.Operator = req.Operator
	who := "agent " + req.AgentID
	if req.Operator != "" {
		who = "operator " + req.Operator
	}
	dec, diag := env.Authorize(pps)
	d.Errors = append(d.Errors, diagErrors("project", diag)...)
	if !dec {
		d.Policies = reasons("project", diag)
		return deny(d, ReasonProjectPolicy, fmt.Sprintf("project %s's policies do not permit %s for %s", req.Project, req.Action, who)), nil
	}
	if fe := unevaluatedForbids(pps, diag); len(fe) > 0 {
		d.Policies = prefixed("project", fe)
		return deny(d, ReasonProjectPolicy, forbidDenial("project "+req.Project, pps, fe)), nil
	}
	d.Policies = reasons("project", diag)
	if req.Operator != "" {
		d.Allowed, d.Reason, d.Message = true, ReasonOperator, "allowed by the project's policies for operator "+req.Operator
		return d, nil
	}
	if m == nil {
		d.Allowed, d.Reason, d.Message = true, ReasonMandateNotRequired, "allowed by the project's policies (project requires no mandate)"
		return d, nil
	}
	dec, diag = env.Authorize(m.Policies)
	d.Errors = append(d.Errors, diagErrors("mandate", diag)...)
	if !dec {
		d.Policies = append(d.Policies, reasons("mandate", diag)...)
		d.Granted = Grants(m.Policies)
		return deny(d, ReasonScopeViolation, fmt.Sprintf("mandate %s does not permit %s (tool %s) for agent %s", m.Claims.JTI, req.Action, req.ToolName, req.AgentID)), nil
	}
	if fe := unevaluatedForbids(m.Policies, diag); len(fe) > 0 {
		d.Policies = append(d.Policies, prefixed("mandate", fe)...)
		d.Granted = Grants(m.Policies)
		return deny(d, ReasonScopeViolation, forbidDenial("mandate "+m.Claims.JTI, m.Policies, fe)), nil
	}
	d.Policies = append(d.Policies, reasons("mandate", diag)...)
	d.Allowed, d.Reason, d.Message = true, ReasonAllowed, "allowed by the project's policies and the mandate"
	return d, nil
}

func reasons(prefix string, diag cedar.Diagnostic) []string {
	out := make([]string, 0, len(diag.Reasons))
	for _, r := range diag.Reasons {
		out = append(out, prefix+":"+string(r.PolicyID))
	}
	sort.Strings(out)
	return out
}

func diagErrors(prefix string, diag cedar.Diagnostic) []string {
	var out []string
	for _, e := range diag.Errors {
		out = append(out, prefix+":"+e.String())
	}
	return out
}

// verify verifies token against issuer, caching the signature check per
// token. The issuer's current key and the time window are checked on every
// call, so a rotated key or an expiry takes effect at once.
func (g *Gate) verify(ctx context.Context, token, issuer string) (*mandate.Mandate, error) {
	g.mu.Lock()
	c, ok := g.mandates[token]
	g.mu.Unlock()
	if ok {
		if c.m.Claims.Issuer != issuer {
			return nil, g.verifier.VerifyDecoded(ctx, c.m, issuer) // wrong issuer message
		}
		pub, err := g.cfg.Keys.PublicKey(ctx, c.m.Claims.Issuer, c.m.Header.Kid)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(pub, c.pub) {
			if err := g.verifier.CheckTime(c.m); err != nil {
				return nil, err
			}
			return c.m, nil
		}
	}
	m, err := mandate.Decode(token)
	if err != nil {
		return nil, err
	}
	if err := g.verifier.VerifyDecoded(ctx, m, issuer); err != nil {
		return nil, err
	}
	// Issue refuses a policy set a catalogue's rule refuses (ATP's: a
	// mandate permitting invoke_hem enumerates its hem_ids); a token
	// signed some other way (an old key holder, a hand-made token) is
	// refused here too.
	if err := mandate.CheckPolicies(m.Policies); err != nil {
		return nil, fmt.Errorf("token %s: %w", m.Claims.JTI, err)
	}
	pub, err := g.cfg.Keys.PublicKey(ctx, m.Claims.Issuer, m.Header.Kid)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	if len(g.mandates) >= g.cfg.CacheSize {
		clear(g.mandates)
	}
	g.mandates[token] = cachedMandate{m: m, pub: pub}
	g.mu.Unlock()
	return m, nil
}

// FlushCache forgets every verified mandate and parsed policy set.
func (g *Gate) FlushCache() {
	g.mu.Lock()
	clear(g.mandates)
	clear(g.projects)
	g.mu.Unlock()
}

// projectPolicies returns the parsed policy set of doc, parsing it once
// per version.
func (g *Gate) projectPolicies(doc *PolicyDoc) (*cedar.PolicySet, error) {
	g.mu.Lock()
	c, ok := g.projects[doc.Project]
	g.mu.Unlock()
	if ok && c.version == doc.Version && c.sha == doc.SHA256 {
		return c.ps, nil
	}
	ps, err := mandate.ParsePolicies("project "+doc.Project, doc.Policies)
	if err != nil {
		return nil, fmt.Errorf("authz: stored policies of %s: %w", doc.Project, err)
	}
	g.mu.Lock()
	g.projects[doc.Project] = cachedPolicies{version: doc.Version, sha: doc.SHA256, ps: ps}
	g.mu.Unlock()
	return ps, nil
}

func (g *Gate) audit(ctx context.Context, req *Request, d *Decision) {
	if g.cfg.Audit == nil {
		return
	}
	dec := DecisionDeny
	if d.Allowed {
		dec = DecisionAllow
	}
	g.cfg.Audit.Audit(ctx, req.Version, &AuditRecord{
		Time: g.cfg.Now().UTC(), ProjectID: req.Project, ChannelID: req.Channel, AgentID: req.AgentID, Operator: req.Operator,
		ToolName: req.ToolName, ToolCallID: req.ToolCallID, Action: d.Action, Decision: dec, Reason: d.Reason,
		Policies: nonNil(d.Policies), MandateJTI: d.MandateJTI, MandateIssuer: d.MandateIssuer, ResourceID: d.ResourceID,
	})
}

// Grants summarises what a policy set permits, one line per permit policy:
// its action scope, and "when conditions hold" when it has conditions.
func Grants(ps *cedar.PolicySet) []string {
	type g struct {
		line int
		s    string
	}
	var gs []g
	for id, p := range ps.All() {
		if p.Effect() != cedar.Permit {
			continue
		}
		a := (*ast.Policy)(p.AST())
		s := actionScopeText(a.Action)
		if len(a.Conditions) > 0 {
			s += " (when its conditions hold)"
		}
		gs = append(gs, g{p.Position().Line, fmt.Sprintf("%s: %s", id, s)})
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].line < gs[j].line })
	out := make([]string, len(gs))
	for i, x := range gs {
		out[i] = x.s
	}
	return out
}

func actionScopeText(s ast.IsActionScopeNode) string {
	switch n := s.(type) {
	case ast.ScopeTypeAll:
		return "any action"
	case ast.ScopeTypeEq:
		return n.Entity.String()
	case ast.ScopeTypeIn:
		return "actions in " + n.Entity.String()
	case ast.ScopeTypeInSet:
		parts := make([]string, len(n.Entities))
		for i, e := range n.Entities {
			parts[i] = e.String()
		}
		return strings.Join(parts, ", ")
	}
	return fmt.Sprintf("%T", s)
}

// AuditSubject is the subject of a project's audit records.
func AuditSubject(ver, project, channel string) (string, error) {
	s, err := subjects.Event(ver, project, channel, subjects.Sys, "authz", "decision")
	if err != nil {
		return "", err
	}
	return s.String(), nil
}
