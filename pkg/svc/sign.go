package svc

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/internal/reqsign"
	"github.com/utpmesh/utpmesh/subjects"
)

// Signed writes: a client signs the body of a write with its connection's
// nkey (internal/reqsign) so that the server's audit names the identity;
// the server verifies the signature before it applies the write.

// Names resolves the public nkey of a signed request to the name of the
// mesh identity that holds it (e.g. "admin"); ok is false for an unknown
// key.
type Names func(pub string) (name string, ok bool)

type signerKey struct{}

// Unwrap verifies a request received on subject: a signed body yields the
// request inside it, and ctx carries its signer (Signer). An unsigned body
// is returned as is. A bad signature, or a key the server's identities
// (Config.Identities, SetIdentities) do not know, is an error naming the key (reqsign.ErrSignature); the caller
// refuses and audits it.
func (s *Server) Unwrap(ctx context.Context, subject string, data []byte) (context.Context, []byte, error) {
	var names reqsign.Names
	if n := s.names.Load(); n != nil && *n != nil {
		names = reqsign.Names(*n)
	}
	req, signer, err := reqsign.Unwrap(subject, data, time.Now(), names)
	if err != nil {
		return ctx, nil, err
	}
	return context.WithValue(ctx, signerKey{}, signer), req, nil
}

// SetIdentities replaces Config.Identities, also while the server serves
// (a mesh learns its identities after it starts the service); nil: a
// valid signature is named by its key.
func (s *Server) SetIdentities(names Names) { s.names.Store(&names) }

// Signer is who signed the request a handler serves, as Unwrap verified
// it ("identity:<name>", or "key:<pub>" without Identities), else
// fallback.
func Signer(ctx context.Context, fallback string) string {
	if a, _ := ctx.Value(signerKey{}).(string); a != "" {
		return a
	}
	return fallback
}

// ToolSubject returns the tool-scoped subject of op for tool,
// cg.<ver>.<project>.<channel>.svc.<service>.<op>.<tool>.
func (e Endpoint) ToolSubject(project, op, tool string) (string, error) {
	subj, err := subjects.ToolService(e.Version, project, e.Channel, e.Service, op, tool)
	if err != nil {
		return "", err
	}
	return subj.String(), nil
}

// Send sends req on subject (a subject of this endpoint's service, say
// ToolSubject's) and decodes the reply into resp, applying the endpoint's
// timeout when ctx has no deadline; the request is resent when the
// subject's op may be (Ops). With sign, the body is signed with the
// connection's nkey when it has one (internal/reqsign); a copy resent
// carries the same signature, which the server accepts for
// reqsign.MaxSkew.
func (e Endpoint) Send(ctx context.Context, subject string, sign bool, req, resp any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx, cancel := deadline.Bound(ctx, e.Timeout)
	defer cancel()
	if sign {
		raw, err := json.Marshal(req)
		if err != nil {
			return fmt.Errorf("%w: encode request: %v", ErrBadRequest, err)
		}
		body, err := reqsign.Wrap(e.NC, subject, raw)
		if err != nil {
			return err
		}
		req = json.RawMessage(body)
	}
	return e.call(ctx, subject, opOf(subject), req, resp)
}
