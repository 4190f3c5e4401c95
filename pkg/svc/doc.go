// Package svc is the request-reply plumbing of the mesh's own services (the
// CardStore, the tool registry, the inbox…) on "svc" subjects:
//
//	cg.<ver>.<project_id>.<channel_id>.svc.<service>.<op>
//
// These requests travel over core NATS, never JetStream: the command stream
// captures cmd.>, so a service under cmd.> would have its requests stored and
// answered by the stream. The project and channel in the subject scope the
// request: a service handler receives them as a Scope and must not touch
// another project's data.
//
// # Wire format
//
// A request body is one JSON object. A successful reply is one JSON object
// with no top-level "error" key. A failed reply is
//
//	{"error": {"code": "<code>", "message": "<what is wrong>"}}
//
// with the same code also in the NATS header Svc-Error-Code. Codes are lower
// snake case; the ones every service may return are listed in the Code*
// constants, and each service maps its own sentinel errors to codes through a
// Codes table shared by its server and client, so that errors.Is works the
// same on both ends.
//
// # Server
//
// Server subscribes one queue group per service (so several processes can
// serve the same service), decodes the subject into a Scope, and runs
// handlers on a bounded pool of goroutines: requests are handled
// concurrently (the CardStore's group commit depends on it), and a full pool
// applies back-pressure instead of spawning without limit. Every handler runs
// under a per-request deadline. Stop drains: it stops taking requests,
// finishes the ones in flight within the context's deadline, and returns.
//
// # Client
//
// Call sends one request and decodes the reply. It applies a default timeout
// when the context has none, refuses a request larger than the connection's
// max payload before sending it, and turns "no responders" into
// ErrUnavailable with a message that says which service is missing.
package svc
