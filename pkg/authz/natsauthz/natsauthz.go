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
// stream cg_evt_<ver> stores them. A record that cannot be published is
// logged, never allowed to fail the call.
package natsauthz

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// ServiceName is the service token: cg.<ver>.<project>.<channel>.svc.authz.<op>.
const ServiceName = "authz"

// The operations.
const (
	OpPut       = "put"
	OpGet       = "get"
	OpConfigGet = "config_get"
	OpConfigPut = "config_put"
	OpTest      = "test"
	OpQuery     = "query"
	// OpHistory lists the kept versions of the project's policy set.
	OpHistory = "history"
	// OpHistoryGet returns one kept version with its text.
	OpHistoryGet = "history_get"
	// OpRollback stores a kept version's text as a new version.
	OpRollback = "rollback"
	// OpIssuerKey returns the project's mandate issuer public key (read
	// only; the private key never leaves the mesh core). Workers outside
	// the mesh process verify mandates with it (Remote).
	OpIssuerKey = "issuer_key"
)

// Wire codes besides svc's common ones.
const (
	CodeInvalidPolicy  = "invalid_policy"
	CodeMandateInvalid = "mandate_invalid"
	CodeClosed         = "closed"
)

// errMandate is the client-side sentinel of CodeMandateInvalid.
var errMandate = errors.New("natsauthz: mandate refused")

// Codes maps sentinels to wire codes and back.
var Codes = svc.Codes{
	{Err: authz.ErrInvalidPolicy, Code: CodeInvalidPolicy},
	{Err: authz.ErrNotFound, Code: svc.CodeNotFound},
	{Err: authz.ErrInvalidRequest, Code: svc.CodeBadRequest},
	{Err: authz.ErrClosed, Code: CodeClosed},
	{Err: authz.ErrConflict, Code: svc.CodeConflict},
	{Err: errMandate, Code: CodeMandateInvalid},
	{Err: ErrForbidden, Code: svc.CodeForbidden},
}

// ErrMandate matches (errors.Is) a mandate_invalid reply.
var ErrMandate = errMandate

// Request and reply bodies.
type (
	// PutRequest is the body of put.
	PutRequest struct {
		Policies string `json:"policies"`
		// BaseVersion, when set, is the version the caller reviewed (0:
		// none stored); the put is refused with conflict if the stored
		// version differs.
		BaseVersion *uint64 `json:"base_version,omitempty"`
	}
	// HistoryReply is the reply of history: the kept versions, newest
	// first.
	HistoryReply struct {
		Versions []authz.PolicyVersion `json:"versions"`
	}
	// HistoryGetRequest is the body of history_get.
	HistoryGetRequest struct {
		Version uint64 `json:"version"`
	}
	// RollbackRequest is the body of rollback: restore Version; the
	// stored version must be BaseVersion.
	RollbackRequest struct {
		Version     uint64 `json:"version"`
		BaseVersion uint64 `json:"base_version"`
	}
	// DocReply is the reply of put and get.
	DocReply struct {
		Doc *authz.PolicyDoc `json:"doc"`
	}
	// ConfigReply is the reply of config_get and config_put; the body of
	// config_put is the config itself.
	ConfigReply struct {
		Config authz.ProjectConfig `json:"config"`
	}
	// TestRequest is the body of test: one authorization question against
	// the stored policies (and the mandate, when given).
	TestRequest struct {
		AgentID string `json:"agent_id"`
		// ToolName is looked up in the registry for its action and
		// scopes; Action overrides (Namespace::"id").
		ToolName        string   `json:"tool_name"`
		Action          string   `json:"action,omitempty"`
		Scopes          []string `json:"scopes,omitempty"`
		BookingObjectID string   `json:"booking_object_id,omitempty"`
		BookingState    *string  `json:"booking_state,omitempty"`
		HEMID           string   `json:"hem_id,omitempty"`
		Mandate         string   `json:"mandate,omitempty"`
	}
	// TestReply is the reply of test.
	TestReply struct {
		Decision *authz.Decision `json:"decision"`
	}
	// QueryRequest is the body of query (the Windley Loop).
	QueryRequest struct {
		AgentID      string  `json:"agent_id,omitempty"`
		Mandate      string  `json:"mandate,omitempty"`
		BookingState *string `json:"booking_state,omitempty"`
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
}

// Server serves the policy service.
type Server struct {
	cfg   ServerConfig
	srv   *svc.Server
	nc    *nats.Conn            // audit records
	names atomic.Pointer[Names] // SetIdentities
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
	s := &Server{cfg: cfg, srv: srv, nc: nc}
	for op, h := range map[string]svc.HandlerFunc{
		OpPut: s.signed(s.put), OpGet: s.get, OpConfigGet: s.configGet, OpConfigPut: s.signed(s.configPut), OpTest: s.test, OpQuery: s.query,
		OpHistory: s.history, OpHistoryGet: s.historyGet, OpRollback: s.signed(s.rollback), OpIssuerKey: s.issuerKey,
	} {
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

// Stop stops serving.
func (s *Server) Stop(ctx context.Context) error { return s.srv.Stop(ctx) }

func decode(data []byte, v any) error {
	if len(data) == 0 {
		data = []byte("{}")
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: request body: %v", authz.ErrInvalidRequest, err)
	}
	return nil
}

func (s *Server) put(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req PutRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	var doc *authz.PolicyDoc
	var err error
	if req.BaseVersion != nil {
		h, herr := s.historyStore()
		if herr != nil {
			return nil, herr
		}
		doc, err = h.ReplacePolicies(ctx, sc.Project, req.Policies, *req.BaseVersion)
	} else {
		doc, err = s.cfg.Store.PutPolicies(ctx, sc.Project, req.Policies)
	}
	if err != nil {
		return nil, err
	}
	s.auditChange(ctx, sc, docDetail(doc))
	return DocReply{Doc: doc}, nil
}

func (s *Server) historyStore() (authz.PolicyHistory, error) {
	h, ok := s.cfg.Store.(authz.PolicyHistory)
	if !ok {
		return nil, fmt.Errorf("%w: this policy store keeps no history", authz.ErrInvalidRequest)
	}
	return h, nil
}

func (s *Server) history(ctx context.Context, sc svc.Scope, _ []byte) (any, error) {
	h, err := s.historyStore()
	if err != nil {
		return nil, err
	}
	vs, err := h.History(ctx, sc.Project)
	if err != nil {
		return nil, err
	}
	if vs == nil {
		vs = []authz.PolicyVersion{}
	}
	return HistoryReply{Versions: vs}, nil
}

func (s *Server) historyGet(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req HistoryGetRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	h, err := s.historyStore()
	if err != nil {
		return nil, err
	}
	doc, err := h.PolicyVersion(ctx, sc.Project, req.Version)
	if err != nil {
		return nil, err
	}
	return DocReply{Doc: doc}, nil
}

func (s *Server) rollback(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req RollbackRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if req.Version == 0 {
		return nil, fmt.Errorf("%w: version is required (1 or more; history lists the kept versions)", authz.ErrInvalidRequest)
	}
	h, err := s.historyStore()
	if err != nil {
		return nil, err
	}
	doc, err := h.Rollback(ctx, sc.Project, req.Version, req.BaseVersion)
	if err != nil {
		return nil, err
	}
	s.auditChange(ctx, sc, docDetail(doc))
	return DocReply{Doc: doc}, nil
}

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

func (s *Server) get(ctx context.Context, sc svc.Scope, _ []byte) (any, error) {
	doc, err := s.cfg.Store.Policies(ctx, sc.Project)
	if err != nil {
		return nil, err
	}
	return DocReply{Doc: doc}, nil
}

func (s *Server) configGet(ctx context.Context, sc svc.Scope, _ []byte) (any, error) {
	c, err := s.cfg.Store.Config(ctx, sc.Project)
	if err != nil {
		return nil, err
	}
	return ConfigReply{Config: c}, nil
}

func (s *Server) configPut(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var c authz.ProjectConfig
	if err := decode(data, &c); err != nil {
		return nil, err
	}
	if err := s.cfg.Store.PutConfig(ctx, sc.Project, c); err != nil {
		return nil, err
	}
	c, err := s.cfg.Store.Config(ctx, sc.Project)
	if err != nil {
		return nil, err
	}
	s.auditChange(ctx, sc, map[string]string{"mandate": string(c.Mandate)})
	return ConfigReply{Config: c}, nil
}

func (s *Server) test(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var tr TestRequest
	if err := decode(data, &tr); err != nil {
		return nil, err
	}
	if tr.AgentID == "" {
		return nil, fmt.Errorf("%w: agent_id is required", authz.ErrInvalidRequest)
	}
	req := &authz.Request{Version: sc.Version, Project: sc.Project, Channel: sc.Channel, AgentID: tr.AgentID,
		ToolName: tr.ToolName, Scopes: tr.Scopes, Mandate: tr.Mandate, BookingState: tr.BookingState}
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
	args := map[string]string{}
	if tr.BookingObjectID != "" {
		args["booking_object_id"] = tr.BookingObjectID
	}
	if tr.HEMID != "" {
		args["hem_id"] = tr.HEMID
	}
	req.Arguments, _ = json.Marshal(args)
	d, err := s.cfg.Gate.Decide(ctx, req)
	if err != nil {
		return nil, err
	}
	return TestReply{Decision: d}, nil
}

func (s *Server) query(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var qr QueryRequest
	if err := decode(data, &qr); err != nil {
		return nil, err
	}
	r, err := s.cfg.Querier.Query(ctx, authz.QueryInput{Project: sc.Project, AgentID: qr.AgentID, Mandate: qr.Mandate, BookingState: qr.BookingState})
	if authz.IsMandateError(err) {
		return nil, fmt.Errorf("%w: %v", errMandate, err)
	}
	if err != nil {
		return nil, err
	}
	return QueryReply{Residual: r}, nil
}

// Client talks to the policy service.
type Client struct {
	ep svc.Endpoint
}

// NewClient returns a client on nc for protocol version ver ("" = default).
func NewClient(nc *nats.Conn, ver string) (*Client, error) {
	if nc == nil {
		return nil, errors.New("natsauthz: nil NATS connection")
	}
	ep := svc.NewEndpoint(nc, ServiceName, Codes)
	if ver != "" {
		ep.Version = ver
	}
	return &Client{ep: ep}, nil
}

// PutPolicies validates and stores the project's policy set.
func (c *Client) PutPolicies(ctx context.Context, project, text string) (*authz.PolicyDoc, error) {
	var r DocReply
	if err := c.signedCall(ctx, project, OpPut, PutRequest{Policies: text}, &r); err != nil {
		return nil, err
	}
	return r.Doc, nil
}

// ReplacePolicies stores text as the project's policy set if the stored
// version is still base (0: none stored); else the error wraps
// authz.ErrConflict.
func (c *Client) ReplacePolicies(ctx context.Context, project, text string, base uint64) (*authz.PolicyDoc, error) {
	var r DocReply
	if err := c.signedCall(ctx, project, OpPut, PutRequest{Policies: text, BaseVersion: &base}, &r); err != nil {
		return nil, err
	}
	if r.Doc == nil {
		return nil, fmt.Errorf("%w: reply has no doc", svc.ErrBadReply)
	}
	return r.Doc, nil
}

// History lists the kept versions of the project's policy set, newest
// first.
func (c *Client) History(ctx context.Context, project string) ([]authz.PolicyVersion, error) {
	var r HistoryReply
	if err := c.ep.Call(ctx, project, OpHistory, struct{}{}, &r); err != nil {
		return nil, err
	}
	return r.Versions, nil
}

// PolicyVersion returns one kept version with its text.
func (c *Client) PolicyVersion(ctx context.Context, project string, version uint64) (*authz.PolicyDoc, error) {
	var r DocReply
	if err := c.ep.Call(ctx, project, OpHistoryGet, HistoryGetRequest{Version: version}, &r); err != nil {
		return nil, err
	}
	if r.Doc == nil {
		return nil, fmt.Errorf("%w: reply has no doc", svc.ErrBadReply)
	}
	return r.Doc, nil
}

// Rollback restores a kept version as a new version, if the stored
// version is still base.
func (c *Client) Rollback(ctx context.Context, project string, version, base uint64) (*authz.PolicyDoc, error) {
	var r DocReply
	if err := c.signedCall(ctx, project, OpRollback, RollbackRequest{Version: version, BaseVersion: base}, &r); err != nil {
		return nil, err
	}
	if r.Doc == nil {
		return nil, fmt.Errorf("%w: reply has no doc", svc.ErrBadReply)
	}
	return r.Doc, nil
}

// Policies returns the project's policy set.
func (c *Client) Policies(ctx context.Context, project string) (*authz.PolicyDoc, error) {
	var r DocReply
	if err := c.ep.Call(ctx, project, OpGet, struct{}{}, &r); err != nil {
		return nil, err
	}
	if r.Doc == nil {
		return nil, fmt.Errorf("%w: reply has no doc", svc.ErrBadReply)
	}
	return r.Doc, nil
}

// Config returns the project's config.
func (c *Client) Config(ctx context.Context, project string) (authz.ProjectConfig, error) {
	var r ConfigReply
	err := c.ep.Call(ctx, project, OpConfigGet, struct{}{}, &r)
	return r.Config, err
}

// PutConfig stores the project's config.
func (c *Client) PutConfig(ctx context.Context, project string, cfg authz.ProjectConfig) error {
	return c.signedCall(ctx, project, OpConfigPut, cfg, &ConfigReply{})
}

var _ authz.PolicyHistory = (*Client)(nil)

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
	subj, err := authz.AuditSubject(ver, rec.ProjectID, rec.ChannelID)
	if err == nil {
		var body []byte
		if body, err = json.Marshal(rec); err == nil {
			err = p.NC.Publish(subj, body)
		}
	}
	if err != nil {
		log.Warn("authz audit record not published", "err", err, "project", rec.ProjectID, "tool", rec.ToolName, "decision", rec.Decision)
	}
}
