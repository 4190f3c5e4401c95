package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/cynode/audit"
	"github.com/utpmesh/utpmesh/services/cynode/store"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// CedarAction is the registry cedar_action of every CyNodeAI tool and the
// action the gateway's access policies are evaluated on.
const CedarAction = `Action::"mcp.tool.invoke"`

// OperatorCedarAction is the registry cedar_action of the operator-only
// CyNodeAI tools (Spec.Operator): an action of their own, so a project's
// policies grant it to operators and no agent's mandate holds it by
// holding CedarAction.
const OperatorCedarAction = `Action::"mcp.tool.operate"`

// ToolEntityType is the Cedar type of the resource: McpTool::"<tool>".
const ToolEntityType = "McpTool"

var invokeAction = types.NewEntityUID("Action", "mcp.tool.invoke")

// AuditFunc stores one audit record durably.
type AuditFunc func(ctx context.Context, ver string, rec *audit.Record) error

// Options configure a Gateway.
type Options struct {
	Config *Config
	// Keys resolve the projects' mandate issuer keys. Required.
	Keys mandate.KeyResolver
	// Store holds the tasks task scoping checks. Required.
	Store store.Store
	// Audit stores the audit records. Required.
	Audit AuditFunc
	// Conn provides the mesh's NATS connection to tools that ask the mesh
	// (node.*); optional.
	Conn func(ctx context.Context) (*nats.Conn, error)
	// Now is the clock; default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Gateway is the pre-handler layer every CyNodeAI tool runs behind.
type Gateway struct {
	cfg      *Config
	limits   Limits
	verifier *mandate.Verifier
	st       store.Store
	auditf   AuditFunc
	now      func() time.Time
	log      *slog.Logger
	policies *cedar.PolicySet
	disabled map[string]bool
	conn     func(ctx context.Context) (*nats.Conn, error)
}

// New checks o and returns a gateway. A configuration whose access
// policies do not parse is refused; empty policies are accepted (and
// refuse every call).
func New(o Options) (*Gateway, error) {
	if o.Config == nil || o.Keys == nil || o.Store == nil || o.Audit == nil {
		return nil, errors.New("cynode gateway: Options need Config, Keys, Store and Audit")
	}
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	g := &Gateway{cfg: o.Config, limits: o.Config.Limits.withDefaults(), verifier: &mandate.Verifier{Keys: o.Keys, Now: o.Now},
		st: o.Store, auditf: o.Audit, now: o.Now, log: o.Logger, disabled: map[string]bool{}, conn: o.Conn}
	if o.Config.AccessPolicies != "" {
		ps, err := mandate.ParsePolicies("cynode access_policies", o.Config.AccessPolicies)
		if err != nil {
			return nil, fmt.Errorf("cynode config: %w", err)
		}
		g.policies = ps
	}
	for _, t := range o.Config.DisabledTools {
		g.disabled[t] = true
	}
	return g, nil
}

// Limits are the gateway's effective limits.
func (g *Gateway) Limits() Limits { return g.limits }

// Store is the gateway's store.
func (g *Gateway) Store() store.Store { return g.st }

// Spec is one tool behind the gateway.
type Spec struct {
	Name        string
	Description string
	// Params is the JSON Schema of the arguments.
	Params string
	// Scope says which side may call the tool.
	Scope Scope
	// TaskScoped tools need task_id, of a task of the caller's project.
	TaskScoped bool
	// BinaryFields are top-level arguments holding base64 content: they
	// count against MaxInputBytes but not MaxTextBytes.
	BinaryFields []string
	// Operator makes the tool operator-only: registry options.principal
	// operator (the mesh's admission refuses it to agents), and the
	// gateway refuses every caller but an operator (defence in depth).
	// Tools that write what guards agents' own permissions are (system
	// settings: the agents.* switches, the sandbox's added images).
	Operator bool
	// Run executes an allowed call.
	Run func(ctx context.Context, x *Exec) (any, error)
}

// Identity is who calls, as the gateway resolved it: an agent (AgentID
// and its registration) or an operator (Operator).
type Identity struct {
	AgentID string
	Agent
	// Operator is the operator's name of an operator's call (principal
	// operator:<name> of the mesh's admission); "" for an agent.
	Operator string
}

// Who names the caller in records (a setting's updated_by): the agent id,
// or "operator:<name>".
func (id Identity) Who() string {
	if id.Operator != "" {
		return utp.PrincipalOperator + ":" + id.Operator
	}
	return id.AgentID
}

// Exec is one allowed call.
type Exec struct {
	Call     *worker.Call
	Identity Identity
	Project  string
	// TaskID, RunID, JobID are the call's top-level ids ("" when absent).
	// For a task-scoped tool the task exists in Project.
	TaskID, RunID, JobID string
	Args                 json.RawMessage
	Now                  time.Time
	Limits               Limits
	Store                store.Store
	// Config is the gateway's configuration (read only).
	Config *Config
	// Conn provides the mesh's NATS connection (nil when not configured).
	Conn func(ctx context.Context) (*nats.Conn, error)
	// ChangesetHash, set by a git tool, goes into the call's audit record.
	ChangesetHash string
}

// Bind decodes the arguments (toolkit.Bind); a mismatch is the
// response model's invalid_argument naming it.
func (x *Exec) Bind(v any) error {
	var ce *card.Error
	if err := toolkit.Bind(x.Args, v); errors.As(err, &ce) {
		return Errorf(TypeInvalidArgument, "%s", ce.Message)
	}
	return nil
}

// Tool wraps a spec as a worker tool behind the gateway: the toolkit's
// spec (target cynode.<name>, cedar action CedarAction, or
// OperatorCedarAction and principal operator for Spec.Operator) and its
// audit hook, which stores the call's audit record. An incomplete spec
// fails with toolkit.ErrSpec.
func (g *Gateway) Tool(sp Spec) (worker.Tool, error) {
	ts := toolkit.Spec{Name: sp.Name, Description: sp.Description, Params: sp.Params, Target: "cynode." + sp.Name,
		AfterExecution: card.Suspend, CedarAction: CedarAction, Risk: registry.RiskLow, Confirmation: registry.ConfirmNever}
	if sp.Operator {
		ts.Operator, ts.Risk, ts.CedarAction = true, registry.RiskHigh, OperatorCedarAction
	}
	t, err := ts.Tool(g.handler(sp), toolkit.Hooks{Audit: g.audit, Now: g.now})
	if err != nil {
		return worker.Tool{}, fmt.Errorf("cynode: %w", err)
	}
	return t, nil
}

// ids are the top-level ids the gateway reads from the arguments.
type ids struct {
	TaskID string `json:"task_id"`
	RunID  string `json:"run_id"`
	JobID  string `json:"job_id"`
}

func (g *Gateway) handler(sp Spec) worker.HandlerFunc {
	return func(ctx context.Context, call *worker.Call) (worker.Result, error) {
		rec := &audit.Record{Time: g.now().UTC(), ProjectID: call.ProjectID, ChannelID: call.ChannelID, Subject: call.Command.AgentID,
			Tool: sp.Name, Server: audit.Server, ToolCallID: call.Command.ToolCallID, TurnID: call.Command.AgentTurnID,
			GroupIDs: []string{}, RoleNames: []string{}}
		toolkit.Annotate(ctx, rec)
		var a ids
		_ = json.Unmarshal(call.Arguments, &a) // the worker validated the object; non-string ids stay ""
		rec.TaskID, rec.RunID, rec.JobID = a.TaskID, a.RunID, a.JobID

		value, err := g.run(ctx, sp, call, a, rec)
		if err == nil {
			var raw []byte
			raw, err = encodeSuccess(value)
			if err == nil && len(raw) > g.limits.MaxResponseBytes {
				err = Errorf(TypeResponseTooLarge, "the result of %s is %d bytes, over the limit of %d (limits.max_response_bytes); ask for less (a smaller limit, one artifact at a time)",
					sp.Name, len(raw), g.limits.MaxResponseBytes).With(map[string]any{"size_bytes": len(raw), "limit_bytes": g.limits.MaxResponseBytes})
			}
			if err == nil {
				rec.Status = audit.StatusSuccess
				return worker.OK(json.RawMessage(raw)), nil
			}
		}
		ge := asError(err)
		rec.Status, rec.ErrorType = audit.StatusError, ge.Type
		return worker.Result{}, ge.cardError()
	}
}

// audit is the toolkit's audit hook: it stores the call's audit record
// (a call the gateway did not admit is a deny).
func (g *Gateway) audit(ctx context.Context, o *toolkit.Outcome) {
	rec, ok := o.Detail.(*audit.Record)
	if !ok {
		return
	}
	rec.DurationMS = o.Duration.Milliseconds()
	if rec.Decision == "" {
		rec.Decision = audit.DecisionDeny
	}
	if err := g.auditf(ctx, o.Call.Version, rec); err != nil {
		g.log.Error("cynode audit record not stored", "err", err, "tool", rec.Tool, "tool_call_id", rec.ToolCallID, "decision", rec.Decision)
	}
}

// run applies the gateway rules in order, then the tool.
func (g *Gateway) run(ctx context.Context, sp Spec, call *worker.Call, a ids, rec *audit.Record) (any, error) {
	id, err := g.identify(ctx, call)
	if err != nil {
		return nil, err
	}
	rec.AgentType, rec.UserID = string(id.Type), id.User
	if id.Operator != "" {
		rec.Subject, rec.AgentType = id.Who(), utp.PrincipalOperator
	}
	rec.GroupIDs, rec.RoleNames = nonNil(id.Groups), nonNil(id.Roles)
	if g.disabled[sp.Name] {
		return nil, Errorf(TypeToolDisabled, "tool %s is disabled by the administrator (disabled_tools in the cynode configuration)", sp.Name)
	}
	switch {
	case sp.Operator && id.Operator == "":
		return nil, Errorf(TypeNotAllowed, "tool %s is an operator's tool (it writes what guards agents' permissions) and this call comes from agent %s: no agent may call it, whatever its mandate or type; an operator runs it", sp.Name, id.AgentID).
			With(map[string]any{"principal": utp.PrincipalAgent + ":" + id.AgentID, "required_principal": utp.PrincipalOperator})
	case !sp.Operator && id.Operator != "":
		return nil, Errorf(TypeNotAllowed, "tool %s is an agent's tool; an operator calls only the operator tools (db.system_setting.create|update|delete)", sp.Name)
	case id.Operator != "":
		return g.exec(ctx, sp, call, id, a, rec)
	}
	if !Allows(g.cfg.allowlist(id.Type), sp.Name) {
		return nil, Errorf(TypeNotAllowed, "tool %s is not on the %s agent allowlist (allowed: %v)", sp.Name, id.Type, g.cfg.allowlist(id.Type)).
			With(map[string]any{"agent_type": id.Type})
	}
	if !sp.Scope.Admits(id.Type) {
		return nil, Errorf(TypeNotAllowed, "tool %s has scope %s: %s agents may not call it", sp.Name, sp.Scope, id.Type).
			With(map[string]any{"agent_type": id.Type, "tool_scope": sp.Scope})
	}
	if err := g.authorize(id, call.ProjectID, sp.Name, a.TaskID); err != nil {
		return nil, err
	}
	return g.exec(ctx, sp, call, id, a, rec)
}

// exec runs an admitted call: the input limits, the task check, the tool.
func (g *Gateway) exec(ctx context.Context, sp Spec, call *worker.Call, id Identity, a ids, rec *audit.Record) (any, error) {
	if err := g.checkInput(sp, call.Arguments); err != nil {
		return nil, err
	}
	if sp.TaskScoped {
		if err := g.checkTask(ctx, sp.Name, call.ProjectID, a.TaskID); err != nil {
			return nil, err
		}
	}
	rec.Decision = audit.DecisionAllow
	x := &Exec{Call: call, Identity: id, Project: call.ProjectID, TaskID: a.TaskID, RunID: a.RunID, JobID: a.JobID,
		Args: call.Arguments, Now: g.now().UTC(), Limits: g.limits, Store: g.st, Config: g.cfg, Conn: g.conn}
	v, err := sp.Run(ctx, x)
	rec.ChangesetHash = x.ChangesetHash
	return v, err
}

// identify resolves the caller. A call the mesh admitted (issue 23)
// carries its principal: an operator's is the operator; an agent's is the
// agent whose mandate the mesh verified (the admission names the
// mandate's jti; the card no longer carries the token). A call without an
// admission is identified from the mandate in its tool.call card, which
// must verify against the project's issuer key and be the calling agent's.
// Either way an agent's type comes from the operator's registration of
// that agent id.
func (g *Gateway) identify(ctx context.Context, call *worker.Call) (Identity, error) {
	if call.Admission != nil {
		kind, name, _ := strings.Cut(call.Principal, ":")
		switch {
		case call.Admission.Principal != call.Principal || name == "":
			return Identity{}, Errorf(TypeUnauthenticated, "the call's principal %q is not its admission's %q", call.Principal, call.Admission.Principal)
		case kind == utp.PrincipalOperator:
			return Identity{Operator: name}, nil
		case kind != utp.PrincipalAgent || name != call.Command.AgentID:
			return Identity{}, Errorf(TypeUnauthenticated, "the call's principal %q is not agent:%s", call.Principal, call.Command.AgentID)
		case call.Admission.MandateJTI == "":
			return Identity{}, Errorf(TypeUnauthenticated, "no mandate: CyNodeAI tools need a mandate, and the mesh admitted this call without one (a project that needs none); issue agent %s a mandate", name)
		}
		ag, ok := g.cfg.Agents[name]
		if !ok {
			return Identity{}, Errorf(TypeUnauthenticated, "agent %q has no registered agent type: add it under \"agents\" in the cynode configuration with type pm, pa or sandbox", name)
		}
		return Identity{AgentID: name, Agent: ag}, nil
	}
	var token string
	if call.CallCard != nil {
		if raw, ok := call.CallCard.Metadata.Extra[authz.MetadataMandate]; ok {
			if err := json.Unmarshal(raw, &token); err != nil {
				return Identity{}, Errorf(TypeUnauthenticated, "tool.call metadata.mandate is not a JSON string holding the token")
			}
		}
	}
	if token == "" {
		return Identity{}, Errorf(TypeUnauthenticated, "no mandate: CyNodeAI tools need the caller's mandate in the tool.call card's metadata.mandate (utpmesh call --mandate, agent.Config.Mandate)")
	}
	m, err := g.verifier.Verify(ctx, token, mandate.IssuerName(call.ProjectID))
	if err != nil {
		return Identity{}, Errorf(TypeUnauthenticated, "mandate refused: %v", err)
	}
	if m.Claims.Subject != call.Command.AgentID {
		return Identity{}, Errorf(TypeUnauthenticated, "mandate %s is for agent %q, the call comes from agent %q", m.Claims.JTI, m.Claims.Subject, call.Command.AgentID)
	}
	ag, ok := g.cfg.Agents[m.Claims.Subject]
	if !ok {
		return Identity{}, Errorf(TypeUnauthenticated, "agent %q has no registered agent type: add it under \"agents\" in the cynode configuration with type pm, pa or sandbox", m.Claims.Subject)
	}
	return Identity{AgentID: m.Claims.Subject, Agent: ag}, nil
}

// authorize evaluates the access policies: principal Agent::"<id>"
// (member of Group::"<g>" and Role::"<r>"), action
// Action::"mcp.tool.invoke", resource McpTool::"<tool>", context
// {tool, agent_type, project, task_id, user}.
func (g *Gateway) authorize(id Identity, project, tool, taskID string) error {
	if g.policies == nil {
		return Errorf(TypeAccessDenied, "no access policy is configured (access_policies in the cynode configuration is empty): every call is refused; add a Cedar permit on Action::\"mcp.tool.invoke\"")
	}
	principal := authz.AgentUID(id.AgentID)
	var parents []types.EntityUID
	for _, gr := range id.Groups {
		parents = append(parents, types.NewEntityUID("Group", types.String(gr)))
	}
	for _, r := range id.Roles {
		parents = append(parents, types.NewEntityUID("Role", types.String(r)))
	}
	resource := types.NewEntityUID(ToolEntityType, types.String(tool))
	em := types.EntityMap{principal: types.Entity{UID: principal, Parents: types.NewEntityUIDSet(parents...)}}
	dec, diag := cedar.Authorize(g.policies, em, cedar.Request{Principal: principal, Action: invokeAction, Resource: resource,
		Context: types.NewRecord(types.RecordMap{
			"tool": types.String(tool), "agent_type": types.String(string(id.Type)), "project": types.String(project),
			"task_id": types.String(taskID), "user": types.String(id.User),
		})})
	if dec == cedar.Allow {
		return nil
	}
	var why []string
	for _, r := range diag.Reasons {
		why = append(why, string(r.PolicyID))
	}
	msg := fmt.Sprintf("the access policies do not permit agent %s (%s) to invoke %s", id.AgentID, id.Type, tool)
	if len(why) > 0 {
		msg = fmt.Sprintf("the access policies forbid agent %s (%s) to invoke %s (policies %v)", id.AgentID, id.Type, tool, why)
	}
	return Errorf(TypeAccessDenied, "%s", msg).With(map[string]any{"action": CedarAction, "resource": resource.String(), "policies": nonNil(why)})
}

// checkInput applies the size limits to the arguments.
func (g *Gateway) checkInput(sp Spec, args json.RawMessage) error {
	if len(args) > g.limits.MaxInputBytes {
		return Errorf(TypeSizeLimit, "the arguments of %s are %d bytes, over the limit of %d (limits.max_input_bytes); send less per call", sp.Name, len(args), g.limits.MaxInputBytes).
			With(map[string]any{"size_bytes": len(args), "limit_bytes": g.limits.MaxInputBytes})
	}
	var top map[string]any
	if err := json.Unmarshal(args, &top); err != nil {
		return Errorf(TypeInvalidArgument, "arguments: %v", err)
	}
	for k, v := range top {
		if slices.Contains(sp.BinaryFields, k) {
			continue
		}
		if path, n := longestString(k, v); n > g.limits.MaxTextBytes {
			return Errorf(TypeSizeLimit, "argument %s of %s is %d bytes, over the text limit of %d (limits.max_text_bytes); shorten it", path, sp.Name, n, g.limits.MaxTextBytes).
				With(map[string]any{"argument": path, "size_bytes": n, "limit_bytes": g.limits.MaxTextBytes})
		}
	}
	return nil
}

func longestString(path string, v any) (string, int) {
	switch x := v.(type) {
	case string:
		return path, len(x)
	case []any:
		best, n := path, 0
		for i, e := range x {
			if p, m := longestString(fmt.Sprintf("%s[%d]", path, i), e); m > n {
				best, n = p, m
			}
		}
		return best, n
	case map[string]any:
		best, n := path, 0
		for k, e := range x {
			if p, m := longestString(path+"."+k, e); m > n {
				best, n = p, m
			}
		}
		return best, n
	}
	return path, 0
}

// checkTask requires task_id and a task of the caller's project.
func (g *Gateway) checkTask(ctx context.Context, tool, project, taskID string) error {
	if taskID == "" {
		return Errorf(TypeInvalidArgument, "%s is task-scoped: pass task_id (the id of a task of project %s)", tool, project)
	}
	t, err := g.st.GetTask(ctx, taskID)
	if errors.Is(err, store.ErrNotFound) {
		return Errorf(TypeNotFound, "task %s does not exist in project %s; pass the task_id of one of its tasks", taskID, project)
	}
	if err != nil {
		return Errorf(TypeUnavailable, "reading task %s: %v", taskID, err)
	}
	if t.ProjectID != project {
		// Answered like a missing task, so a caller learns nothing of
		// other projects' tasks.
		return Errorf(TypeNotFound, "task %s does not exist in project %s; pass the task_id of one of its tasks", taskID, project)
	}
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// DefaultPageSize is the page size of a list call that passes no limit.
const DefaultPageSize = 50

// Page turns a call's limit and cursor into a store page; a limit over
// limits.max_list_limit is refused.
func (x *Exec) Page(limit int, cursor string) (store.Page, error) {
	if limit == 0 {
		limit = min(DefaultPageSize, x.Limits.MaxListLimit)
	}
	if limit < 0 || limit > x.Limits.MaxListLimit {
		return store.Page{}, Errorf(TypeInvalidArgument, "limit %d is out of range: pass 1..%d (limits.max_list_limit) and page on with next_cursor", limit, x.Limits.MaxListLimit)
	}
	return store.Page{Limit: limit, Cursor: cursor}, nil
}

// PageSchema are the JSON Schema properties limit and cursor.
const PageSchema = `"limit":{"type":"integer","minimum":1},"cursor":{"type":"string","maxLength":1024}`

// IDSchema is the JSON Schema of an id argument.
const IDSchema = `{"type":"string","minLength":1,"maxLength":128}`

// ContextSchema are the optional run_id and job_id properties of
// task-scoped tools (the seed's SHOULD).
const ContextSchema = `"run_id":` + IDSchema + `,"job_id":` + IDSchema
