package natsreg

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// ServerConfig configures a Server: the options every mesh service's
// server takes (svc.ServerConfig). Identities names the signer of every
// registry change by its mesh identity; a signed write by a key it does
// not know is refused (forbidden). See internal/reqsign and
// docs/security.md ("Audit").
type ServerConfig = svc.ServerConfig

// Server serves a registry.Registry on cg.<ver>.*.*.svc.registry.<op>.
type Server struct {
	reg registry.Registry
	srv *svc.Server
}

// NewServer starts serving reg on nc. When it returns, the subscription is
// registered with the NATS server nc is connected to.
func NewServer(nc *nats.Conn, reg registry.Registry, cfg ServerConfig) (*Server, error) {
	if reg == nil {
		return nil, errors.New("natsreg: nil registry")
	}
	srv, err := svc.NewServer(nc, cfg.Config(ServiceName, Codes))
	if err != nil {
		return nil, err
	}
	s := &Server{reg: reg, srv: srv}
	// Serve flushes its subscriptions: a request sent on another
	// connection right after NewServer returns finds a responder.
	err = srv.Serve(map[string]svc.HandlerFunc{
		OpPut: fieldDetails(s.signed(s.put)), OpGet: fieldDetails(s.get),
		OpList: fieldDetails(s.list), OpDelete: fieldDetails(s.signed(s.delete)),
	}, s.toolPut)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Subject returns the subject pattern the server listens on.
func (s *Server) Subject() string { return s.srv.Subject() }

// Stop stops serving and waits for requests in flight until ctx ends. It
// does not close the registry.
func (s *Server) Stop(ctx context.Context) error {
	return s.srv.Stop(ctx)
}

// fieldDetails attaches {"field", "reason"} to the error reply of a
// *registry.FieldError, so that the client can rebuild it.
func fieldDetails(h svc.HandlerFunc) svc.HandlerFunc {
	return func(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
		reply, err := h(ctx, sc, data)
		var fe *registry.FieldError
		if err != nil && errors.As(err, &fe) {
			return nil, svc.WithDetail(err, fieldDetail{Field: fe.Field, Reason: fe.Msg})
		}
		return reply, err
	}
}

// decode unmarshals a request body like svc.Decode, but passes a
// *registry.FieldError (from registry.Options' decoder; it wraps
// registry.ErrInvalid) through unchanged.
func decode(data []byte, v any) error {
	return svc.DecodeAs(data, v, svc.ErrBadRequest, registry.ErrInvalid)
}

func (s *Server) put(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req putRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	subj, _ := subjects.Service(sc.Version, sc.Project, sc.Channel, ServiceName, sc.Op)
	return s.putEntry(ctx, sc, req, subj.String())
}

// putEntry stores the entry of a put and audits the change.
func (s *Server) putEntry(ctx context.Context, sc svc.Scope, req putRequest, subject string) (any, error) {
	e := req.Entry
	if e != nil {
		switch e.ProjectID {
		case "":
			e.ProjectID = sc.Project
		case sc.Project:
		default:
			return nil, &registry.FieldError{Field: "project_id", Msg: fmt.Sprintf(
				"%q differs from project %q of the request subject (a request may only touch its subject's project)",
				e.ProjectID, sc.Project)}
		}
	}
	out, err := s.reg.Put(ctx, e)
	if err != nil {
		return nil, err
	}
	s.audit(ctx, sc, subject, true, nil, map[string]string{"tool_name": out.ToolName, "target_subject": out.TargetSubject})
	return entryReply{Entry: out}, nil
}

func (s *Server) get(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req keyRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	e, err := s.reg.Get(ctx, sc.Project, req.ToolName)
	if err != nil {
		return nil, err
	}
	return entryReply{Entry: e}, nil
}

func (s *Server) list(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req listRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	es, err := s.reg.List(ctx, sc.Project)
	if err != nil {
		return nil, err
	}
	if es == nil {
		es = []*registry.Entry{}
	}
	return listReply{Entries: es}, nil
}

func (s *Server) delete(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
	var req keyRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if err := s.reg.Delete(ctx, sc.Project, req.ToolName); err != nil {
		return nil, err
	}
	subj, _ := subjects.Service(sc.Version, sc.Project, sc.Channel, ServiceName, sc.Op)
	s.audit(ctx, sc, subj.String(), true, nil, map[string]string{"tool_name": req.ToolName})
	return emptyReply{}, nil
}
