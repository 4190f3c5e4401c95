package admit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/subjects"
)

// Card metadata keys the admission service writes on a tool.call card.
const (
	// MetadataMandateJTI is the jti of the mandate that authorized the call.
	MetadataMandateJTI = "mandate_jti"
	// MetadataMandateSHA256 is the hex SHA-256 of the mandate token.
	MetadataMandateSHA256 = "mandate_sha256"
	// MetadataAdmission is the decision summary (Summary).
	MetadataAdmission = "admission"
)

// AuthorID is the author of the results of denied calls.
const AuthorID = "mesh.admission"

// ReasonNoGate is the decision reason of a mesh without a gate.
const ReasonNoGate = "no_gate"

// Summary is the decision a tool.call card records under
// metadata.admission.
type Summary struct {
	Decision  string   `json:"decision"`
	Reason    string   `json:"reason"`
	Principal string   `json:"principal"`
	Policies  []string `json:"policies,omitempty"`
	// KeyID is the admission key that signed the command (admitted calls).
	KeyID string `json:"kid,omitempty"`
}

// CallCardID is the card id the admission service gives the tool.call
// card of (project, turn, call): utp.CallRef.CallCardID.
func CallCardID(project, turn, call string) string {
	return utp.Ref(project, turn, call).CallCardID()
}

// decision is what admission decided about one call.
type decision struct {
	allowed bool
	reason  string
	message string
	detail  json.RawMessage
	summary Summary
	jti     string
}

func (s *Service) dispatch(ctx context.Context, ts subjects.ToolSubject, kind string, data []byte) (any, error) {
	var req utp.DispatchRequest
	if err := svc.DecodeAs(data, &req, ErrInvalid); err != nil {
		return nil, err
	}
	args, err := req.Check()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, strings.TrimPrefix(err.Error(), utp.ErrDispatch.Error()+": "))
	}
	name := ts.Tool
	if kind == utp.PrincipalAgent && subjects.ToolToken(req.AgentID) != ts.Tool {
		return nil, fmt.Errorf("%w: agent_id %q is not the agent of the subject (%q): an agent dispatches on svc.dispatch.call.%s",
			ErrForbidden, req.AgentID, ts.Tool, subjects.ToolToken(req.AgentID))
	}
	if kind == utp.PrincipalAgent {
		name = req.AgentID
		if strings.HasPrefix(req.AgentID, utp.OperatorAgentPrefix) {
			return nil, fmt.Errorf("%w: agent_id %q: agent ids beginning %q are the operators' (their results wake the operator); use another agent id",
				ErrForbidden, req.AgentID, utp.OperatorAgentPrefix)
		}
	} else if want := utp.OperatorAgentID(name); req.AgentID != want {
		return nil, fmt.Errorf("%w: agent_id %q: an operator's calls are made as agent_id %q (the operator %s dispatches on svc.dispatch.operator.%s)",
			ErrForbidden, req.AgentID, want, name, name)
	}
	if q := s.cfg.Quorum; q != nil {
		// Without quorum nothing can be stored: say so at once instead of
		// letting the reads and writes below wait out their bounds.
		if err := q(); err != nil {
			return nil, fmt.Errorf("%w: tool_call_id %s not admitted, nothing written: %w; retrying later with the same tool_call_id is safe",
				ErrUnavailable, req.ToolCallID, err)
		}
	}
	project := ts.Project
	ent, builtin, err := s.entry(ctx, project, req.ToolName)
	if err != nil {
		return nil, err
	}
	tmpl, err := subjects.ParseTemplate(ent.TargetSubject)
	if err != nil {
		return nil, fmt.Errorf("admit: tool %q: target_subject: %w", req.ToolName, err)
	}
	target, err := tmpl.Render(ts.Version, project, ts.Channel)
	if err != nil {
		return nil, fmt.Errorf("admit: tool %q: render target_subject for %s/%s/%s: %w", req.ToolName, ts.Version, project, ts.Channel, err)
	}
	ae := req.AfterExecution
	if ae == "" {
		ae = ent.AfterExecution
	}
	if !ae.Valid() {
		ae = card.Suspend
	}
	principal := kind + ":" + name

	d, err := s.decide(ctx, ts, kind, name, &req, ent, builtin, args)
	if err != nil {
		return nil, err
	}
	d.summary.Principal = principal
	if d.allowed {
		d.summary.KeyID = s.cfg.Key.KeyID
	}
	cc, err := s.callCard(project, &req, args, target.String(), principal, d)
	if err != nil {
		return nil, err
	}
	if d.allowed && s.announce != nil {
		return s.dispatchBeside(ctx, ts, &req, cc, target.String(), ae, principal, d)
	}
	cc, prev, err := s.storeCallCard(ctx, &req, cc, principal)
	if err != nil {
		return nil, err
	}
	reply := dispatchReply(&req, d, cc, target.String(), ae)
	if !d.allowed {
		reply.Error = &card.Error{Code: card.CodeAuthFailed, Message: d.message, Detail: d.detail}
		if prev != nil && prev.Decision == authz.DecisionAllow {
			// A retry of a call admitted before: its result comes from the
			// worker; a denial now must not race it with another.
			return reply, nil
		}
		if err := s.deny(ctx, ts, &req, cc, ae, d); err != nil {
			return nil, err
		}
		return reply, nil
	}
	if err := s.publish(ctx, ts, &req, cc, target.String(), ae, principal, d.jti); err != nil {
		return nil, err
	}
	return reply, nil
}

// entry looks the tool up: a PMO built-in has a fixed entry.
func (s *Service) entry(ctx context.Context, project, tool string) (*registry.Entry, bool, error) {
	if registry.IsReserved(tool) {
		return &registry.Entry{ProjectID: project, ToolName: tool, AfterExecution: card.Suspend,
			TargetSubject: "cg.{ver}.{project_id}.{channel_id}.cmd.sys.pmo.internal." + strings.ToLower(tool)}, true, nil
	}
	ent, err := s.registryEntry(ctx, project, tool)
	if errors.Is(err, registry.ErrNotFound) {
		return nil, false, fmt.Errorf("%w: tool %q is not registered in project %q (utpmesh tools list --project %s)", ErrUnknownTool, tool, project, project)
	}
	if err != nil {
		return nil, false, fmt.Errorf("admit: look up tool %q in project %q: %w", tool, project, err)
	}
	return ent, false, nil
}

// decide authorizes the call: operator-only tools are refused to agents,
// then the gate decides (and audits). An error means no decision could be
// made (the policy store failed): nothing is written.
func (s *Service) decide(ctx context.Context, ts subjects.ToolSubject, kind, name string, req *utp.DispatchRequest,
	ent *registry.Entry, builtin bool, args json.RawMessage) (*decision, error) {
	d := &decision{}
	if kind == utp.PrincipalAgent && ent.Options.Principal == registry.PrincipalOperator {
		d.reason = authz.ReasonOperatorOnly
		d.message = fmt.Sprintf("tool %s may be called by an operator only (registry options.principal %q); an agent cannot call it", req.ToolName, registry.PrincipalOperator)
		d.detail, _ = json.Marshal(authz.AuthFailedDetail{Reason: d.reason, Tool: req.ToolName, RequiredScopes: []string{}, Granted: []string{}, Policies: []string{}})
		d.summary = Summary{Decision: authz.DecisionDeny, Reason: d.reason}
		act, _ := authz.ActionOf(ent)
		if a := s.cfg.Audit; a != nil {
			a.Audit(ctx, ts.Version, &authz.AuditRecord{Time: time.Now().UTC(), ProjectID: ts.Project, ChannelID: ts.Channel,
				AgentID: req.AgentID, ToolName: req.ToolName, ToolCallID: req.ToolCallID, Action: act.String(),
				Decision: authz.DecisionDeny, Reason: d.reason, Policies: []string{}})
		} else {
			s.log.Warn("refused an operator-only tool to an agent", "tool", req.ToolName, "agent_id", req.AgentID, "project", ts.Project)
		}
		return d, nil
	}
	g := s.cfg.Gate
	if g == nil {
		d.allowed, d.reason = true, ReasonNoGate
		d.summary = Summary{Decision: authz.DecisionAllow, Reason: ReasonNoGate}
		return d, nil
	}
	areq := &authz.Request{Version: ts.Version, Project: ts.Project, Channel: ts.Channel, AgentID: req.AgentID,
		ToolName: req.ToolName, ToolCallID: req.ToolCallID, Builtin: builtin, Scopes: ent.Options.Scopes}
	if kind == utp.PrincipalOperator {
		areq.Operator = name
	} else {
		areq.Mandate = req.Mandate
	}
	var err error
	if areq.Action, err = authz.ActionOf(ent); err != nil {
		return nil, fmt.Errorf("%w: tool %s: %v", ErrInvalid, req.ToolName, err)
	}
	// The gate sees the arguments the worker will run with.
	areq.Arguments = args
	if full, err := registry.ApplyArgs(ent.Options, args); err == nil {
		areq.Arguments = full
	}
	ad, err := g.DecideAudited(ctx, areq)
	if err != nil {
		return nil, fmt.Errorf("admit: authorize %s: %w", req.ToolName, err)
	}
	d.allowed, d.reason, d.message, d.jti = ad.Allowed, ad.Reason, ad.Message, ad.MandateJTI
	d.summary = Summary{Decision: authz.DecisionDeny, Reason: ad.Reason, Policies: ad.Policies}
	if ad.Allowed {
		d.summary.Decision = authz.DecisionAllow
	} else {
		d.detail, _ = json.Marshal(g.DenialDetail(areq, ad))
	}
	return d, nil
}

// dispatchReply is the answer to a dispatch whose tool.call card is cc.
func dispatchReply(req *utp.DispatchRequest, d *decision, cc *card.Card, target string, ae card.AfterExecution) utp.DispatchReply {
	return utp.DispatchReply{
		Admitted: d.allowed, ToolCallID: req.ToolCallID, ToolCallCardID: cc.CardID, StepID: cc.Metadata.StepID,
		TargetSubject: target, AfterExecution: ae, Traceparent: req.Traceparent,
	}
}

// callCard builds the call's tool.call card (without the mandate).
func (s *Service) callCard(project string, req *utp.DispatchRequest, args json.RawMessage,
	target, principal string, d *decision) (*card.Card, error) {
	content, err := json.Marshal(card.ToolCallContent{ToolName: req.ToolName, Arguments: args, TargetSubject: target})
	if err != nil {
		return nil, fmt.Errorf("admit: encode tool.call content: %w", err)
	}
	created := req.CreatedAt.UTC()
	if req.CreatedAt.IsZero() {
		created = time.Now().UTC()
	}
	author := req.AgentID
	if kind, _, _ := strings.Cut(principal, ":"); kind == utp.PrincipalOperator {
		author = principal
	}
	cc := &card.Card{
		CardID: CallCardID(project, req.AgentTurnID, req.ToolCallID), ProjectID: project, Type: card.TypeToolCall, AuthorID: author,
		Content: content, ToolCallID: req.ToolCallID, CreatedAt: created,
		Metadata: card.Metadata{
			AgentID: req.AgentID, AgentTurnID: req.AgentTurnID, TurnEpoch: req.TurnEpoch,
			StepID: req.StepID, ToolCallID: req.ToolCallID, TraceID: utp.TraceID(req.Traceparent),
			ParentStepID: req.ParentStepID, Role: "assistant",
		},
	}
	extra := map[string]json.RawMessage{}
	for k, v := range req.Metadata {
		extra[k] = v
	}
	if req.Mandate != "" {
		sum := sha256.Sum256([]byte(req.Mandate))
		extra[MetadataMandateSHA256], _ = json.Marshal(hex.EncodeToString(sum[:]))
	}
	if d.jti != "" {
		extra[MetadataMandateJTI], _ = json.Marshal(d.jti)
	}
	extra[MetadataAdmission], _ = json.Marshal(d.summary)
	if req.Traceparent != "" {
		extra[card.ExtraTraceparent], _ = json.Marshal(req.Traceparent)
	}
	cc.Metadata.Extra = extra
	if err := cc.Validate(); err != nil {
		return nil, fmt.Errorf("%w: tool.call card: %v", ErrInvalid, err)
	}
	return cc, nil
}

// storeCallCard writes the call's tool.call card cc and returns the
// stored one: on a retry of the same tool_call_id the card of the first
// dispatch, when its content and principal are the same, with the
// decision the first dispatch recorded (prev; nil for a new card).
func (s *Service) storeCallCard(ctx context.Context, req *utp.DispatchRequest, cc *card.Card, principal string) (stored *card.Card, prev *Summary, err error) {
	return s.storeCallCardWith(ctx, req, cc, principal, nil)
}

// storeCallCardWith is storeCallCard that stores the card with its
// command m in the outbox (Config.Outbox) when m is not nil.
func (s *Service) storeCallCardWith(ctx context.Context, req *utp.DispatchRequest, cc *card.Card, principal string, m *nats.Msg) (stored *card.Card, prev *Summary, err error) {
	project := cc.ProjectID
	if m != nil {
		err = s.cfg.Outbox(ctx, cc, m)
	} else {
		err = s.cfg.Store.Put(ctx, cc)
	}
	if errors.Is(err, cardstore.ErrConflict) {
		old, gerr := s.cfg.Store.Get(ctx, project, cc.CardID)
		if gerr != nil {
			return nil, nil, fmt.Errorf("admit: read the tool.call card of the earlier dispatch of tool_call_id %s: %w", req.ToolCallID, gerr)
		}
		var sum Summary
		_ = json.Unmarshal(old.Metadata.Extra[MetadataAdmission], &sum)
		if old.Type != card.TypeToolCall || old.ToolCallID != req.ToolCallID || old.Metadata.AgentTurnID != req.AgentTurnID ||
			old.Metadata.AgentID != req.AgentID || !bytes.Equal(old.Content, cc.Content) {
			return nil, nil, fmt.Errorf("%w: tool_call_id %s of turn %s was dispatched before with another tool, arguments or agent; use a new tool_call_id",
				ErrConflict, req.ToolCallID, req.AgentTurnID)
		}
		if sum.Principal != principal {
			return nil, nil, fmt.Errorf("%w: tool_call_id %s of turn %s was dispatched before by %s, not %s; use a new tool_call_id",
				ErrConflict, req.ToolCallID, req.AgentTurnID, sum.Principal, principal)
		}
		return old, &sum, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("admit: write tool.call card %s of tool_call_id %s: %w", cc.CardID, req.ToolCallID, err)
	}
	return cc, nil, nil
}

// publish sends the admitted command (command) on its target subject.
func (s *Service) publish(ctx context.Context, ts subjects.ToolSubject, req *utp.DispatchRequest, cc *card.Card,
	target string, ae card.AfterExecution, principal, jti string) error {
	m, err := s.command(ts, req, cc, target, ae, principal, jti)
	if err != nil {
		return err
	}
	return s.send(ctx, m, req, cc, target)
}

// command builds the admitted command of a call whose tool.call card is
// cc: Nats-Msg-Id (a retry is a duplicate the stream drops), the
// CG-Admission header, and the verified mandate in CG-Mandate (for the
// tool's own workers; never in the card).
func (s *Service) command(ts subjects.ToolSubject, req *utp.DispatchRequest, cc *card.Card,
	target string, ae card.AfterExecution, principal, jti string) (*nats.Msg, error) {
	now := time.Now().UTC()
	cmd := utp.Command{
		AgentID: req.AgentID, AgentTurnID: req.AgentTurnID, TurnEpoch: req.TurnEpoch, ToolCallID: req.ToolCallID,
		AfterExecution: ae, ToolCallCardID: cc.CardID, StepID: cc.Metadata.StepID, ToolName: req.ToolName, DispatchRequestedAt: &now,
	}
	body, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("admit: encode command: %w", err)
	}
	hdr, err := s.cfg.Key.Sign(utp.Admission{
		Subject: target, AgentID: cmd.AgentID, AgentTurnID: cmd.AgentTurnID, TurnEpoch: cmd.TurnEpoch,
		ToolCallID: cmd.ToolCallID, ToolCallCardID: cmd.ToolCallCardID, ToolName: cmd.ToolName, AfterExecution: ae,
		Principal: principal, CardSHA256: utp.ContentSHA256(cc.Content), MandateJTI: jti, IssuedAt: now.UnixMilli(),
	})
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(target)
	m.Data = body
	h := m.Header
	h.Set(utp.HeaderTraceparent, req.Traceparent)
	h.Set(jetstream.MsgIDHeader, utp.Ref(ts.Project, req.AgentTurnID, req.ToolCallID).MsgID())
	utp.CallHeaders{ProjectID: ts.Project, ChannelID: ts.Channel, AgentID: req.AgentID, AgentTurnID: req.AgentTurnID,
		TurnEpoch: req.TurnEpoch, ToolCallID: req.ToolCallID, StepID: cmd.StepID}.Set(h)
	h.Set(utp.HeaderMsgType, utp.MsgTypeToolCall)
	h.Set(utp.HeaderVersion, ts.Version)
	h.Set(utp.HeaderSender, req.AgentID)
	h.Set(utp.HeaderTimestamp, now.Format(time.RFC3339Nano))
	h.Set(utp.HeaderAdmission, hdr)
	if req.Mandate != "" {
		// Verified by the gate; on a mesh without one, passed on as given
		// (tools that use it verify it themselves).
		h.Set(utp.HeaderMandate, req.Mandate)
	}
	return m, nil
}

// send publishes the command m of the call whose tool.call card is cc.
func (s *Service) send(ctx context.Context, m *nats.Msg, req *utp.DispatchRequest, cc *card.Card, target string) error {
	s.remember(m.Header.Get(utp.HeaderAdmission))
	ack, err := s.publishMsg(ctx, m, "command of tool_call_id "+req.ToolCallID)
	if err != nil {
		return fmt.Errorf("admit: publish command of tool_call_id %s on %s (tool.call card %s is written; retrying with the same tool_call_id is safe): %w",
			req.ToolCallID, target, cc.CardID, err)
	}
	if ack.Duplicate {
		s.log.Debug("admit: command was a duplicate within the stream's window; JetStream kept the first one",
			"tool_call_id", req.ToolCallID, "agent_turn_id", req.AgentTurnID, "subject", target)
	}
	return nil
}

// deny writes the failed auth_failed result of a refused call and reports
// it to the inbox through the command stream (as the unrouted sweeper
// does), so the agent is woken as for any result. A call that has a result
// already (a retry) re-reports that one.
func (s *Service) deny(ctx context.Context, ts subjects.ToolSubject, req *utp.DispatchRequest, cc *card.Card, ae card.AfterExecution, d *decision) error {
	of := worker.ResultOf{Version: ts.Version, ProjectID: ts.Project, ChannelID: ts.Channel,
		AgentID: req.AgentID, AgentTurnID: req.AgentTurnID, TurnEpoch: req.TurnEpoch, ToolCallID: req.ToolCallID,
		StepID: cc.Metadata.StepID, ToolName: req.ToolName, AuthorID: AuthorID, Traceparent: req.Traceparent}
	rc, err := of.Card(card.NewResultContent(card.StatusFailed, ae, card.CodeAuthFailed, d.message, d.detail), cc)
	if err != nil {
		return err
	}
	rc, _, err = worker.WriteResult(ctx, s.cfg.Store, rc)
	if err != nil {
		return fmt.Errorf("admit: write the auth_failed result of tool_call_id %s: %w", req.ToolCallID, err)
	}
	m, err := of.Report(rc)
	if err != nil {
		return fmt.Errorf("admit: %w", err)
	}
	m.Header.Set(jetstream.MsgIDHeader, worker.ReportMsgID(rc.CardID))
	if _, err := s.publishMsg(ctx, m, "auth_failed report of tool_call_id "+req.ToolCallID); err != nil {
		return fmt.Errorf("admit: report the auth_failed result of tool_call_id %s: %w", req.ToolCallID, err)
	}
	s.log.Info("admission refused a call", "project_id", ts.Project, "agent_id", req.AgentID, "tool_name", req.ToolName,
		"tool_call_id", req.ToolCallID, "reason", d.reason)
	return nil
}
