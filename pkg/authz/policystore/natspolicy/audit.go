package natspolicy

import (
	"context"
	"fmt"
	"strconv"

	"github.com/utpmesh/utpmesh/internal/audit"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// actorUnsigned is who made an unsigned change: NATS permissions let
// only the mesh core and the admin identity publish put, rollback and
// config_put (internal/meshauth).
const actorUnsigned = "unverified:admin-or-core"

// signed wraps the handler of a write: it verifies a signed request
// (svc.Server.Unwrap), refuses a bad signature (audited), and passes the
// request with its signer (svc.Signer) to h.
func (s *Server) signed(h svc.HandlerFunc) svc.HandlerFunc {
	return func(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
		subj, _ := subjects.Service(sc.Version, sc.Project, sc.Channel, ServiceName, sc.Op)
		ctx, req, err := s.srv.Unwrap(ctx, subj.String(), data)
		if err != nil {
			err = fmt.Errorf("%w: %v (the request was not applied)", ErrForbidden, err)
			s.srv.Audit(audit.Record{Service: ServiceName, Op: sc.Op, Project: sc.Project, Channel: sc.Channel,
				Actor: actorUnsigned, Code: svc.CodeForbidden, Reason: err.Error(), Subject: subj.String()})
			return nil, err
		}
		return h(ctx, sc, req)
	}
}

// auditChange publishes the record of a policy or config change on
// cg.<ver>.<project>.<channel>.evt.sys.audit.authz, naming the signer.
// It never carries the policy text, only its version and hash.
func (s *Server) auditChange(ctx context.Context, sc svc.Scope, detail map[string]string) {
	subj, _ := subjects.Service(sc.Version, sc.Project, sc.Channel, ServiceName, sc.Op)
	s.srv.Audit(audit.Record{Service: ServiceName, Op: sc.Op, Project: sc.Project, Channel: sc.Channel,
		Actor: svc.Signer(ctx, actorUnsigned), Allowed: true, Subject: subj.String(), Detail: detail})
}

// docDetail names a stored policy version for the audit.
func docDetail(d *authz.PolicyDoc) map[string]string {
	m := map[string]string{"version": strconv.FormatUint(d.Version, 10), "sha256": d.SHA256}
	if d.RolledBackFrom != 0 {
		m["rolled_back_from"] = strconv.FormatUint(d.RolledBackFrom, 10)
	}
	return m
}

// signedCall sends a write signed with the connection's nkey, when it
// has one (svc.Endpoint.Send), so the server's audit names this identity.
func (c *Client) signedCall(ctx context.Context, project, op string, req, resp any) error {
	if err := c.begin(ctx, project); err != nil {
		return err
	}
	subj, err := subjects.Service(c.ep.Version, project, c.ep.Channel, ServiceName, op)
	if err != nil {
		return fmt.Errorf("%w: %v", svc.ErrBadRequest, err)
	}
	return c.ep.Send(ctx, subj.String(), true, req, resp)
}
