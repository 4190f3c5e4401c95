package natspolicy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// ServerConfig configures Register.
type ServerConfig struct {
	// Store serves put, get and the configs; history, history_get and
	// rollback need it to be an authz.PolicyHistory (else they reply
	// bad_request), as is put with base_version.
	Store authz.PolicyStore
	// Version is the protocol version token (audit subjects); the svc
	// server's when empty.
	Version string
	Logger  *slog.Logger
	// OnConfig, when set, is called after every successful config_put
	// with the project's config as stored (e.g. to reload the agents'
	// NATS permissions when a project opts into raw commands).
	OnConfig func(project string, cfg authz.ProjectConfig)
}

// Server holds the policy operations' handlers.
type Server struct {
	cfg ServerConfig
	// srv verifies signed writes (Unwrap, with the identities of its
	// SetIdentities) and publishes the change audits (Audit).
	srv *svc.Server
}

// Register adds the policy operations to srv (before srv.Start); srv
// verifies signed writes against its identities (svc.Server.SetIdentities)
// and publishes the change audits.
func Register(srv *svc.Server, cfg ServerConfig) (*Server, error) {
	if srv == nil || cfg.Store == nil {
		return nil, errors.New("natspolicy: Register needs a svc server and a Store")
	}
	if cfg.Version == "" {
		cfg.Version = srv.Version()
	}
	s := &Server{cfg: cfg, srv: srv}
	for op, h := range map[string]svc.HandlerFunc{
		OpPut: s.signed(s.put), OpGet: s.get, OpConfigGet: s.configGet, OpConfigPut: s.signed(s.configPut),
		OpHistory: s.history, OpHistoryGet: s.historyGet, OpRollback: s.signed(s.rollback),
	} {
		if err := srv.Handle(op, h); err != nil {
			return nil, fmt.Errorf("natspolicy: %w", err)
		}
	}
	return s, nil
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
	s.auditChange(ctx, sc, map[string]string{"mandate": string(c.Mandate), "commands": string(c.Commands)})
	if c.RawCommands() {
		s.logger().Warn("project accepts raw tool commands: agents may publish commands the mesh did not admit; SDK workers run the full gate on them, foreign workers run whatever they are sent (docs/protocol.md, Admission)",
			"project", sc.Project)
	}
	if s.cfg.OnConfig != nil {
		s.cfg.OnConfig(sc.Project, c)
	}
	return ConfigReply{Config: c}, nil
}

func (s *Server) logger() *slog.Logger {
	if s.cfg.Logger != nil {
		return s.cfg.Logger
	}
	return slog.Default()
}
