package natsreg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/internal/audit"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// ErrForbidden matches (errors.Is) a forbidden reply: a tool-scoped put
// (svc.registry.put.<tool>) of an entry of another tool.
var ErrForbidden = errors.New("natsreg: forbidden")

// Actor of an unsigned plain put or delete: NATS permissions let only
// the mesh core and admin identities publish them (internal/meshauth).
const actorUnsigned = "unverified:admin-or-core"

// unwrap verifies a signed request (internal/reqsign) received on
// subject; a bad signature is ErrForbidden, audited.
func (s *Server) unwrap(ctx context.Context, sc svc.Scope, subject string, data []byte) (context.Context, []byte, error) {
	ctx, req, err := s.srv.Unwrap(ctx, subject, data)
	if err != nil {
		err = fmt.Errorf("%w: %v (the request was not applied)", ErrForbidden, err)
		s.audit(ctx, sc, subject, false, err, nil)
		return ctx, nil, err
	}
	return ctx, req, nil
}

// signed wraps a plain write handler with unwrap.
func (s *Server) signed(h svc.HandlerFunc) svc.HandlerFunc {
	return func(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
		subj, _ := subjects.Service(sc.Version, sc.Project, sc.Channel, ServiceName, sc.Op)
		ctx, req, err := s.unwrap(ctx, sc, subj.String(), data)
		if err != nil {
			return nil, err
		}
		return h(ctx, sc, req)
	}
}

// toolPut serves cg.<ver>.*.*.svc.registry.put.<tool>: the put a worker
// registering its own tool sends, which NATS lets only that tool's worker
// identity (and core, admin) publish. The entry's tool must be the
// subject's.
func (s *Server) toolPut(ctx context.Context, ts subjects.ToolSubject, data []byte) (any, error) {
	sc := svc.Scope{Version: ts.Version, Project: ts.Project, Channel: ts.Channel, Op: ts.Op}
	if ts.Op != OpPut {
		return nil, fmt.Errorf("%w: %s has no tool-scoped operation %q (want %s)", svc.ErrBadRequest, ServiceName, ts.Op, OpPut)
	}
	ctx, data, err := s.unwrap(ctx, sc, ts.String(), data)
	if err != nil {
		return nil, err
	}
	var req putRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if req.Entry == nil || subjects.ToolToken(req.Entry.ToolName) != ts.Tool {
		name := ""
		if req.Entry != nil {
			name = req.Entry.ToolName
		}
		err := fmt.Errorf("%w: the entry is tool %q; svc.registry.put.%s registers tool %s only", ErrForbidden, name, ts.Tool, ts.Tool)
		s.audit(ctx, sc, ts.String(), false, err, map[string]string{"tool_name": name, "subject_tool": ts.Tool})
		return nil, err
	}
	return fieldDetails(func(ctx context.Context, sc svc.Scope, _ []byte) (any, error) {
		return s.putEntry(ctx, sc, req, ts.String())
	})(ctx, sc, nil)
}

// audit publishes one record on evt.sys.audit.registry. The actor is the
// request's signer, else what the subject's permissions allow: on a tool's
// subject, tool:<token> (its worker identity, core or admin).
func (s *Server) audit(ctx context.Context, sc svc.Scope, subject string, allowed bool, err error, detail map[string]string) {
	fallback := actorUnsigned
	if ts, perr := subjects.ParseToolService(subject); perr == nil {
		fallback = "unverified:tool:" + ts.Tool
	}
	rec := audit.Record{Time: time.Now().UTC(), Service: ServiceName, Op: sc.Op, Project: sc.Project, Channel: sc.Channel,
		Actor: svc.Signer(ctx, fallback), Allowed: allowed, Subject: subject, Detail: detail}
	if err != nil {
		rec.Code, rec.Reason = svc.CodeOf(Codes, err), err.Error()
	}
	s.srv.Audit(rec)
}

// callTool sends op, signed, on the tool-scoped subject of tool.
func (c *Client) callTool(ctx context.Context, project, op, tool string, req, resp any) error {
	subj, err := c.ep.ToolSubject(project, op, tool)
	if err != nil {
		return &registry.FieldError{Field: "tool_name", Msg: err.Error()}
	}
	return remoteFieldError(c.ep.Send(ctx, subj, true, req, resp))
}

// signedCall sends a plain write signed with the connection's nkey, when
// it has one (internal/reqsign), so the server's audit names the identity.
func (c *Client) signedCall(ctx context.Context, project, op string, req, resp any) error {
	subj, err := svc.Subject(c.ep.Version, project, c.ep.Channel, ServiceName, op)
	if err != nil {
		return &registry.FieldError{Field: "project_id", Msg: err.Error()}
	}
	return remoteFieldError(c.ep.Send(ctx, subj, true, req, resp))
}
