// Package natspolicy serves a policystore.Store over NATS and reads it
// back: the policy operations of the authz service,
// cg.<ver>.<project>.<channel>.svc.authz.<op> with op put, get,
// config_get, config_put, history, history_get and rollback
// (docs/protocol.md). Client is an authz.PolicyHistory over the service.
//
// The policy operations share the service svc.authz (one queue group, one
// table of wire codes) with the gate's operations test, query and
// issuer_key, which pkg/authz/natsauthz serves: natsauthz creates the
// svc.Server and Register adds this package's handlers to it, and
// natsauthz.Client embeds Client. So natspolicy never starts a server of
// its own.
//
// Writes (put, config_put, rollback) may be signed with the caller's nkey
// and are verified and audited with pkg/svc's helpers (Endpoint.Send,
// Server.Unwrap, Signer, Server.Audit): the svc server's identities
// (svc.Server.SetIdentities) name the signer of every change, and a bad
// signature is refused (ErrForbidden, wire code forbidden). Every change
// is audited on cg.<ver>.<project>.<channel>.evt.sys.audit.authz with its
// version and hash, never the policy text.
package natspolicy
