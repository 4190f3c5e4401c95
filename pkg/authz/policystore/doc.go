// Package policystore is the contract of the mesh's policy stores, which
// keep each project's Cedar policy set, its history and its authorization
// config: the Store interface, the Backend interface under it, and
// Versioned, the one implementation of the rules every store shares
// (validation before a write, version numbering, base checks, rollback,
// history, config defaults). It imports no storage engine.
//
// The backends are sibling packages, storage only:
//
//	policystore/boltpolicy      a bbolt file (<DataDir>/policies.db): the
//	                            embedded default of a single-node mesh
//	policystore/jspolicy        a JetStream KV bucket: cluster mode
//	policystore/natspolicy      the NATS server handlers and client of the
//	                            policy operations of svc.authz
//	policystore/policystoretest the conformance suite boltpolicy and
//	                            jspolicy run
//
// natspolicy's handlers are registered on pkg/authz/natsauthz's server,
// which serves the gate's test, query and issuer_key on the same service
// (one queue group, one table of wire codes).
//
// The documents and the read interfaces (authz.PolicyDoc,
// authz.PolicyVersion, authz.ProjectConfig, authz.PolicySource,
// authz.PolicyStore, authz.PolicyHistory) and the sentinel errors
// (authz.ErrNotFound, ErrConflict, ErrInvalidPolicy, ErrInvalidRequest,
// ErrClosed) stay in pkg/authz: the gate reads them there, and this
// package needs authz's schema to validate, so they cannot move here
// without an import cycle.
package policystore
