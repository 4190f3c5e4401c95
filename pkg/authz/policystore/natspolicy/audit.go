package natspolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/utpmesh/utpmesh/internal/audit"
	"github.com/utpmesh/utpmesh/internal/reqsign"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// ErrForbidden matches (errors.Is) a forbidden reply: a write whose
// signature does not verify or names no identity of the mesh.
var ErrForbidden = errors.New("natsauthz: forbidden")

// actorUnsigned is who made an unsigned change: NATS permissions let
// only the mesh core and the admin identity publish put, rollback and
// config_put (internal/meshauth).
const actorUnsigned = "unverified:admin-or-core"

// Names resolves the public nkey of a signed request to the name of the
// mesh identity holding it (internal/reqsign).
type Names func(pub string) (name string, ok bool)

// SetIdentities makes the server name the signer of every policy and
// config change by its identity (the mesh's nkey users); a signed write
// by a key it does not know is refused (forbidden). Without it a valid
// signature is recorded by its key.
func (s *Server) SetIdentities(names Names) { s.names.Store(&names) }

type signerKey struct{}

// signed wraps the handler of a write: it verifies a signed request
// (reqsign), refuses a bad signature (audited), and passes the request
// with its signer to h.
func (s *Server) signed(h svc.HandlerFunc) svc.HandlerFunc {
	return func(ctx context.Context, sc svc.Scope, data []byte) (any, error) {
		subj, _ := subjects.Service(sc.Version, sc.Project, sc.Channel, ServiceName, sc.Op)
		var names reqsign.Names
		if n := s.names.Load(); n != nil && *n != nil {
			names = reqsign.Names(*n)
		}
		req, signer, err := reqsign.Unwrap(subj.String(), data, time.Now(), names)
		if err != nil {
			err = fmt.Errorf("%w: %v (the request was not applied)", ErrForbidden, err)
			s.publish(audit.Record{Service: ServiceName, Op: sc.Op, Project: sc.Project, Channel: sc.Channel,
				Actor: actorUnsigned, Code: svc.CodeForbidden, Reason: err.Error(), Subject: subj.String()})
			return nil, err
		}
		return h(context.WithValue(ctx, signerKey{}, signer), sc, req)
	}
}

// auditChange publishes the record of a policy or config change on
// cg.<ver>.<project>.<channel>.evt.sys.audit.authz, naming the signer.
// It never carries the policy text, only its version and hash.
func (s *Server) auditChange(ctx context.Context, sc svc.Scope, detail map[string]string) {
	subj, _ := subjects.Service(sc.Version, sc.Project, sc.Channel, ServiceName, sc.Op)
	actor, _ := ctx.Value(signerKey{}).(string)
	if actor == "" {
		actor = actorUnsigned
	}
	s.publish(audit.Record{Service: ServiceName, Op: sc.Op, Project: sc.Project, Channel: sc.Channel,
		Actor: actor, Allowed: true, Subject: subj.String(), Detail: detail})
}

func (s *Server) publish(rec audit.Record) {
	if err := audit.Publish(s.nc, s.cfg.Version, rec); err != nil && s.cfg.Logger != nil {
		s.cfg.Logger.Error("authz: audit record not published", "subject", rec.Subject, "err", err)
	}
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
// has one (reqsign), so the server's audit names this identity.
func (c *Client) signedCall(ctx context.Context, project, op string, req, resp any) error {
	subj, err := subjects.Service(c.ep.Version, project, c.ep.Channel, ServiceName, op)
	if err != nil {
		return fmt.Errorf("%w: %v", svc.ErrBadRequest, err)
	}
	raw, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%w: encode request: %v", svc.ErrBadRequest, err)
	}
	body, err := reqsign.Wrap(c.ep.NC, subj.String(), raw)
	if err != nil {
		return err
	}
	return c.ep.Call(ctx, project, op, json.RawMessage(body), resp)
}
