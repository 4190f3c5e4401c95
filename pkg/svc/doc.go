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
// A service may also serve tool-scoped operations (HandleTools), one token
// more than the plain ones:
//
//	cg.<ver>.<project_id>.<channel_id>.svc.<service>.<op>.<tool>
//
// which NATS lets only that tool's worker identity (and the core, admin)
// publish (internal/meshauth): the CardStore's start_call/claim/release/
// put_result.<tool> and the registry's put.<tool>. Same queue group, same
// wire format, a pool of its own. Serve registers a service's handlers and
// starts it in one call; ServerConfig is the part of Config a service's
// caller chooses (natsstore.ServerConfig and natsreg.ServerConfig are
// aliases of it). Audit publishes a service's audit record
// (internal/audit); Unwrap and Signer verify a signed write
// (internal/reqsign) and name its signer.
//
// # Client
//
// Call sends one request and decodes the reply. It applies a default timeout
// when the context has none, refuses a request larger than the connection's
// max payload before sending it, and turns "no responders" into
// ErrUnavailable with a message that says which service is missing.
//
// Endpoint is one service's client side: NewClientEndpoint applies the one
// option set every service client shares (ClientOption: WithVersion,
// WithChannel, WithTimeout, WithAttempt); Endpoint.Call sends a plain
// operation, Endpoint.Send any subject of the service (ToolSubject),
// signed or not. An Endpoint resends the request of an op its service
// declares Read or Deduped (Ops, next to the service's op names) every
// Attempt while no reply has come, and takes the first reply to any copy;
// other ops, and Call and CallMsg, send once (resend.go).
//
// # Why not nats.go micro
//
// The server is not built on github.com/nats-io/nats.go/micro, although it
// would cost one package, because micro would change the wire or slow the
// hot path (svc.cardstore.*, svc.inbox.report):
//
//   - micro runs an endpoint's handler inside the subscription callback,
//     one request at a time, and updates its statistics under one
//     service-wide mutex after every request. The CardStore's group commit
//     needs many requests in flight at once (a bounded pool of 256), so we
//     would spawn our own goroutines inside micro's handler and still pay
//     its lock on every request, for statistics that would then measure
//     only the hand-off.
//   - micro subscribes nine $SRV.PING/INFO/STATS control subjects per
//     service instance. For the mesh's own services they would be new
//     subjects in docs/protocol.md (only the workers' service has them,
//     §2.7), every identity's NATS permissions (internal/meshauth) would
//     have to be written for them, and they would publish the mesh's
//     service inventory to anyone allowed to ask.
//   - micro's error replies carry Nats-Service-Error and
//     Nats-Service-Error-Code headers; ours carry Svc-Error-Code and the
//     {"error": {...}} body. Keeping ours means replying around micro's
//     Error, which leaves its error statistics empty.
//
// The mesh's own services therefore have no micro discovery or
// statistics; their metrics come from pkg/metrics. micro is used where it
// fits: every tool worker registers the micro service "utpmesh-worker"
// (pkg/worker, docs/protocol.md §2.7), so `nats micro ls|info|stats` list
// the workers and their tools' statistics, off the hot path. The wire
// format here is micro-compatible in spirit (JSON request-reply in a queue
// group) should the services move onto micro.
package svc
