// Package natspolicy serves a policystore.Store over NATS and reads it
// back: the policy operations of the authz service,
// cg.<ver>.<project>.<channel>.svc.authz.<op> with op put, get,
// config_get, config_put, history, history_get and rollback
// (docs/protocol.md). Client is a policystore.Store over the service and
// passes policystoretest (natspolicy_test.go serves a boltpolicy store
// with natsauthz.Start on a real nats-server, identities off).
//
// Where Client differs from a local store (the suite's expectations hold
// for all of these):
//   - Close closes the client only: later calls fail with authz.ErrClosed
//     and send nothing, but the NATS connection (the caller's), the
//     service and the store behind it stay open; whoever serves the store
//     stops the service and then closes the store. natsauthz.Client
//     embeds Client, so its Close closes the policy operations only.
//   - What a store is opened with (action source, history limit, clock)
//     is the served store's: the client has no such options.
//   - The project id is checked before anything is sent, with the error a
//     local store returns (authz.ErrInvalidRequest naming project_id), and
//     so is the context. Other errors come back by wire code (Codes) as a
//     *svc.RemoteError that matches the contract's sentinel (errors.Is)
//     and keeps the server's message; besides them the transport fails
//     with svc.ErrUnavailable (nothing serves the subject) or
//     svc.ErrTimeout, which a local store never returns.
//   - Writes are signed when the connection has an nkey; a server with
//     identities refuses a signature it cannot verify with ErrForbidden.
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
