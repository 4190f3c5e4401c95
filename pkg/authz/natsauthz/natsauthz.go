// Package natsauthz serves the authorization layer over NATS: the policy
// service on cg.<ver>.<project>.<channel>.svc.authz.<op> (put, get,
// config_get, config_put, test, query, history, history_get, rollback,
// issuer_key) and the audit publisher on
// cg.<ver>.<project>.<channel>.evt.sys.authz.decision. The policy store's
// operations (put, get, config_get, config_put, history, history_get,
// rollback) are policystore/natspolicy's, registered on this package's
// server; here are the gate's (test, query, issuer_key), Start (store,
// gate, querier and server of one mesh process) and Remote.
//
// Remote is the gate's policy source and key resolver for a worker outside
// the mesh process (utpmesh worker): it reads configs, policy sets and
// issuer public keys over the service, caches them for a short TTL, and
// NewRemoteGate fails closed (auth_failed) when it cannot get them.
//
// The project in the subject scopes every operation: a request may only
// read or change its subject's project. The service has no authentication
// of its own: whoever can publish on svc.authz can change a project's
// policies, so restrict svc.> with NATS permissions in a shared deployment
// (docs/security.md).
//
// Audit records are published with core NATS (fire and forget); the event
// stream cg_evt_<ver> stores them. Publisher sends one record per message;
// Batcher, the auditor of Start's gate, groups the records of one subject
// within 250 ms into one message (one JSON record per line,
// authz.ParseAuditRecords), so the event stream's fsync is not paid per
// call. A record that cannot be published is logged, never allowed to fail
// the call.
package natsauthz

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/natspolicy"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// ServiceName is the service token: cg.<ver>.<project>.<channel>.svc.authz.<op>.
const ServiceName = natspolicy.ServiceName

// The gate's operations; the policy operations (put, get, config_get,
// config_put, history, history_get, rollback) are natspolicy's.
const (
	OpTest  = "test"
	OpQuery = "query"
	// OpIssuerKey returns the project's mandate issuer public key (read
	// only; the private key never leaves the mesh core). Workers outside
	// the mesh process verify mandates with it (Remote).
	OpIssuerKey = "issuer_key"
)

// CodeMandateInvalid is the wire code of a refused mandate (query);
// the policy operations' codes are natspolicy's.
const CodeMandateInvalid = "mandate_invalid"

// Errors of the authz service's gate operations; the policy operations'
// are authz's sentinels and natspolicy.ErrForbidden.
var (
	// ErrMandate matches (errors.Is) a mandate_invalid reply: query was
	// given a mandate that does not verify.
	ErrMandate = errors.New("natsauthz: mandate refused")
	// ErrForbidden matches (errors.Is) a forbidden reply: a write whose
	// signature does not verify or names no identity of the mesh
	// (natspolicy.ErrForbidden).
	ErrForbidden = natspolicy.ErrForbidden
)

// Codes maps sentinels to wire codes and back: natspolicy.Codes and
// mandate_invalid.
var Codes = append(slices.Clone(natspolicy.Codes), svc.CodeMap{Err: ErrMandate, Code: CodeMandateInvalid})

// Request and reply bodies.
type (
	// TestRequest is the body of test: one authorization question against
	// the stored policies (and the mandate, when given).
	TestRequest struct {
		AgentID string `json:"agent_id"`
		// ToolName is looked up in the registry for its action and
		// scopes; Action overrides (Namespace::"id").
		ToolName string   `json:"tool_name"`
		Action   string   `json:"action,omitempty"`
		Scopes   []string `json:"scopes,omitempty"`
		// Arguments are the call's arguments (a JSON object, as a
		// tool.call carries them); the catalogues' entity loaders read
		// them, e.g. ATP's booking_object_id and hem_id.
		Arguments map[string]any `json:"arguments,omitempty"`
		// State is the resource's state to use instead of the
		// catalogue's own (wire: booking_state).
		State *string `json:"booking_state,omitempty"`
		// LegacyResource and LegacyEnumerated are the older form of
		// arguments.booking_object_id and arguments.hem_id (wire:
		// booking_object_id, hem_id), kept for clients written against
		// it; an argument of the same name in Arguments wins.
		LegacyResource   string `json:"booking_object_id,omitempty"`
		LegacyEnumerated string `json:"hem_id,omitempty"`
		Mandate          string `json:"mandate,omitempty"`
	}
	// TestReply is the reply of test.
	TestReply struct {
		Decision *authz.Decision `json:"decision"`
	}
	// QueryRequest is the body of query (the Windley Loop).
	QueryRequest struct {
		AgentID string `json:"agent_id,omitempty"`
		Mandate string `json:"mandate,omitempty"`
		// State is the bound resource's current state (wire:
		// booking_state); nil when unknown.
		State *string `json:"booking_state,omitempty"`
	}
	// QueryReply is the reply of query.
	QueryReply struct {
		Residual *authz.Residual `json:"residual"`
	}
	// IssuerKeyReply is the reply of issuer_key: the project's issuer
	// name, key id and Ed25519 public key (base64url, no padding).
	IssuerKeyReply struct {
		Issuer    string `json:"issuer"`
		KID       string `json:"kid"`
		PublicKey string `json:"public_key"`
	}
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Store serves put, get and the configs; history, history_get and
	// rollback need it to be an authz.PolicyHistory (else they reply
	// bad_request), as is put with base_version.
	Store    authz.PolicyStore
	Gate     *authz.Gate
	Querier  *authz.Querier
	Registry registry.Registry
	// Keys serves issuer_key; without it issuer_key replies not_found.
	Keys    *mandate.KeyDir
	Version string
	Logger  *slog.Logger
	// OnConfig is natspolicy.ServerConfig.OnConfig.
	OnConfig func(project string, cfg authz.ProjectConfig)
}

// Server serves the authz service: the gate's operations here, the
// policy operations through natspolicy.
type Server struct {
	cfg ServerConfig
	srv *svc.Server
	pol *natspolicy.Server
}

// NewServer starts serving on nc.
func NewServer(nc *nats.Conn, cfg ServerConfig) (*Server, error) {
	if cfg.Store == nil || cfg.Gate == nil || cfg.Querier == nil || cfg.Registry == nil {
		return nil, errors.New("natsauthz: ServerConfig needs Store, Gate, Querier and Registry")
	}
	srv, err := svc.NewServer(nc, svc.Config{Service: ServiceName, Version: cfg.Version, Codes: Codes, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, srv: srv}
	if s.pol, err = natspolicy.Register(srv, natspolicy.ServerConfig{Store: cfg.Store, Version: cfg.Version, Logger: cfg.Logger, OnConfig: cfg.OnConfig}); err != nil {
		return nil, err
	}
	for op, h := range map[string]svc.HandlerFunc{OpTest: s.test, OpQuery: s.query, OpIssuerKey: s.issuerKey} {
		if err := srv.Handle(op, h); err != nil {
			return nil, err
		}
	}
	if err := srv.Start(); err != nil {
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		_ = srv.Stop(context.Background())
		return nil, fmt.Errorf("natsauthz: flush subscription: %w", err)
	}
	return s, nil
}

// SetIdentities makes the server name the signer of every policy and
// config change by its mesh identity (the mesh's nkey users); a signed
// write by a key it does not know is refused (forbidden). Without it a
// valid signature is recorded by its key (svc.Server.SetIdentities).
func (s *Server) SetIdentities(names svc.Names) { s.srv.SetIdentities(names) }

// SetIdentities sets the identities of the service's server; see
// Server.SetIdentities.
func (s *Service) SetIdentities(names svc.Names) { s.srv.SetIdentities(names) }

// Stop stops serving.
func (s *Server) Stop(ctx context.Context) error { return s.srv.Stop(ctx) }

func (s *Server) issuerKey(ctx context.Context, sc svc.Scope, _ []byte) (any, error) {
	if s.cfg.Keys == nil {
		return nil, fmt.Errorf("%w: this mesh keeps no issuer keys", authz.ErrNotFound)
	}
	k, err := s.cfg.Keys.Load(ctx, sc.Project)
	if errors.Is(err, mandate.ErrNoKey) {
		return nil, fmt.Errorf("%w: %v", authz.ErrNotFound, err)
	}
	if err != nil {
		return nil, err
	}
	return IssuerKeyReply{Issuer: k.Issuer, KID: k.KID, PublicKey: base64.RawURLEncoding.EncodeToString(k.Public)}, nil
}

func (s *Server) test(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var tr TestRequest
	if err := svc.DecodeAs(data, &tr, authz.ErrInvalidRequest); err != nil {
		return nil, err
	}
	if tr.AgentID == "" {
		return nil, fmt.Errorf("%w: agent_id is required", authz.ErrInvalidRequest)
	}
	req := &authz.Request{Version: sc.Version, Project: sc.Project, Channel: sc.Channel, AgentID: tr.AgentID,
		ToolName: tr.ToolName, Scopes: tr.Scopes, Mandate: tr.Mandate, State: tr.State}
	switch {
	case tr.Action != "":
		a, err := authz.ParseAction(tr.Action)
		if err != nil {
			return nil, err
		}
		req.Action = a
	case tr.ToolName != "":
		e, err := s.cfg.Registry.Get(ctx, sc.Project, tr.ToolName)
		if errors.Is(err, registry.ErrNotFound) {
			return nil, fmt.Errorf("%w: tool %s is not registered in %s; pass action instead", authz.ErrInvalidRequest, tr.ToolName, sc.Project)
		}
		if err != nil {
			return nil, err
		}
		if req.Action, err = authz.ActionOf(e); err != nil {
			return nil, err
		}
		if req.Scopes == nil {
			req.Scopes = e.Options.Scopes
		}
	default:
		return nil, fmt.Errorf("%w: tool_name or action is required", authz.ErrInvalidRequest)
	}
	args, err := json.Marshal(tr.arguments())
	if err != nil {
		return nil, fmt.Errorf("%w: arguments: %v", authz.ErrInvalidRequest, err)
	}
	req.Arguments = args
	d, err := s.cfg.Gate.Decide(ctx, req)
	if err != nil {
		return nil, err
	}
	return TestReply{Decision: d}, nil
}

// arguments returns the call's arguments: Arguments, with the legacy
// top-level fields added under their argument names when Arguments does
// not set them.
func (tr *TestRequest) arguments() map[string]any {
	args := make(map[string]any, len(tr.Arguments)+2)
	for k, v := range tr.Arguments {
		args[k] = v
	}
	for name, v := range map[string]string{"booking_object_id": tr.LegacyResource, "hem_id": tr.LegacyEnumerated} {
		if _, ok := args[name]; !ok && v != "" {
			args[name] = v
		}
	}
	return args
}

func (s *Server) query(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var qr QueryRequest
	if err := svc.DecodeAs(data, &qr, authz.ErrInvalidRequest); err != nil {
		return nil, err
	}
	r, err := s.cfg.Querier.Query(ctx, authz.QueryInput{Project: sc.Project, AgentID: qr.AgentID, Mandate: qr.Mandate, State: qr.State})
	if authz.IsMandateError(err) {
		return nil, fmt.Errorf("%w: %v", ErrMandate, err)
	}
	if err != nil {
		return nil, err
	}
	return QueryReply{Residual: r}, nil
}

// Client talks to the policy service.
// Its policy methods (PutPolicies, ReplacePolicies, History,
// PolicyVersion, Rollback, Policies, Config, PutConfig) are
// natspolicy.Client's.
type Client struct {
	*natspolicy.Client
	ep svc.Endpoint
}

// NewClient returns a client on nc for protocol version ver ("" = default).
func NewClient(nc *nats.Conn, ver string) (*Client, error) {
	if nc == nil {
		return nil, errors.New("natsauthz: nil NATS connection")
	}
	pc, err := natspolicy.NewClient(nc, ver)
	if err != nil {
		return nil, err
	}
	ep := svc.NewEndpoint(nc, ServiceName, Codes)
	if ver != "" {
		ep.Version = ver
	}
	return &Client{Client: pc, ep: ep}, nil
}

// IssuerKey returns the project's issuer public key (Private is nil); an
// error wrapping authz.ErrNotFound when the project has none.
func (c *Client) IssuerKey(ctx context.Context, project string) (*mandate.IssuerKey, error) {
	var r IssuerKeyReply
	if err := c.ep.Call(ctx, project, OpIssuerKey, struct{}{}, &r); err != nil {
		return nil, err
	}
	pub, err := base64.RawURLEncoding.DecodeString(r.PublicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: issuer_key reply: public_key is not a base64url Ed25519 key", svc.ErrBadReply)
	}
	k := &mandate.IssuerKey{Project: project, Issuer: r.Issuer, KID: r.KID, Public: ed25519.PublicKey(pub)}
	if k.Issuer != mandate.IssuerName(project) || k.KID != mandate.KeyID(k.Public) {
		return nil, fmt.Errorf("%w: issuer_key reply: issuer %q / kid %q do not match project %s's key", svc.ErrBadReply, r.Issuer, r.KID, project)
	}
	return k, nil
}

// Test asks one authorization question.
func (c *Client) Test(ctx context.Context, project string, req TestRequest) (*authz.Decision, error) {
	var r TestReply
	if err := c.ep.Call(ctx, project, OpTest, req, &r); err != nil {
		return nil, err
	}
	if r.Decision == nil {
		return nil, fmt.Errorf("%w: reply has no decision", svc.ErrBadReply)
	}
	return r.Decision, nil
}

// Query runs the Windley query.
func (c *Client) Query(ctx context.Context, project string, req QueryRequest) (*authz.Residual, error) {
	var r QueryReply
	if err := c.ep.Call(ctx, project, OpQuery, req, &r); err != nil {
		return nil, err
	}
	if r.Residual == nil {
		return nil, fmt.Errorf("%w: reply has no residual", svc.ErrBadReply)
	}
	return r.Residual, nil
}

// Publisher publishes audit records with core NATS.
type Publisher struct {
	NC     *nats.Conn
	Logger *slog.Logger
}

var _ authz.Auditor = (*Publisher)(nil)

// Audit implements authz.Auditor.
func (p *Publisher) Audit(_ context.Context, ver string, rec *authz.AuditRecord) {
	log := p.Logger
	if log == nil {
		log = slog.Default()
	}
	subj, body, err := auditMessage(ver, rec)
	if err == nil {
		err = p.NC.Publish(subj, body)
	}
	if err != nil {
		warnUnpublished(log, rec, err)
	}
}

// auditMessage is the subject and JSON body of one audit record.
func auditMessage(ver string, rec *authz.AuditRecord) (string, []byte, error) {
	subj, err := authz.AuditSubject(ver, rec.ProjectID, rec.ChannelID)
	if err != nil {
		return "", nil, err
	}
	body, err := json.Marshal(rec)
	return subj, body, err
}

// warnUnpublished logs an audit record that could not be published.
func warnUnpublished(log *slog.Logger, rec *authz.AuditRecord, err error) {
	log.Warn("authz audit record not published", "err", err, "project", rec.ProjectID, "tool", rec.ToolName, "decision", rec.Decision)
}
