// Package natsreg serves a registry.Registry over core NATS request-reply
// and provides Client, a registry.Registry that talks to such a server.
// Processes other than the one holding the registry file (agent runtimes,
// the CLI, tool workers registering themselves) reach the registry through
// it.
//
// # Subjects
//
// Requests go to
//
//	cg.<ver>.<project_id>.<channel_id>.svc.registry.<op>
//
// with op one of put, get, list, delete. The project in the subject scopes
// the request: a request on project A's subject can neither read nor write
// project B's entries. The channel does not scope entries (a Client uses
// DefaultChannel unless WithChannel says otherwise). Server subscribes to
// cg.<ver>.*.*.svc.registry.* in the queue group "utpmesh-registry".
//
// Client.Put sends on cg.<ver>.<project_id>.<channel_id>.svc.registry.put.<tool>
// (subjects.ToolService, tool = the entry's tool_name as a token), which
// NATS lets a worker identity publish for its own tools only; the server
// refuses an entry of another tool there (forbidden, ErrForbidden). Writes
// are signed with the connection's nkey when it has one
// (internal/reqsign), and every change, and every refusal, is published
// as an audit record naming the signer (internal/audit, docs/security.md).
//
// # Operations
//
// Bodies are JSON objects; an entry is a registry.Entry in its JSON form
// (see package registry). Unknown request keys are ignored.
//
//	put     {"entry": {<entry>}}       → {"entry": {<stored entry, with updated_at>}}
//	get     {"tool_name": "echo"}      → {"entry": {<entry>}}
//	list    {}                         → {"entries": [{<entry>}, …]}   (sorted by tool_name, [] when none)
//	delete  {"tool_name": "echo"}      → {}
//
// put: an entry without project_id (or with "") is stored in the subject's
// project; one naming another project is refused with bad_request, naming
// both projects. updated_at in the request is ignored; the store sets it.
//
// # Errors
//
// A failed reply is svc's {"error": {"code", "message", "detail"}}. Codes
// (the Codes table, shared by Server and Client):
//
//   - not_found: no such tool in the project (registry.ErrNotFound).
//   - bad_request: the entry or key breaks a validation rule, or the body
//     is malformed (registry.ErrInvalid).
//   - reserved: tool_name is a built-in PMO name (registry.ErrReserved;
//     the client's error also matches registry.ErrInvalid, as locally).
//   - closed: the registry behind the server is closed (registry.ErrClosed).
//   - svc's common codes (too_large, unavailable, timeout, internal_error).
//
// When the error names a field (a *registry.FieldError on the server),
// detail is {"field": "<path>", "reason": "<what is wrong>"} and message
// is "registry: <path>: <reason>". The Client returns the server's message
// unchanged as its error text; errors.As finds a *registry.FieldError
// (rebuilt from detail) and the *svc.RemoteError in it.
//
// # Caveats
//
//   - The server validates. The Client validates an entry itself
//     (registry.Validate) only when JSON cannot carry it unchanged: raw
//     JSON values that are not valid JSON, NaN, strings that are not valid
//     UTF-8, options Extra keys named like typed options. Invalid UTF-8
//     that the rules allow (e.g. in an envs value) arrives as U+FFFD.
//   - The Client checks project_id itself (it chooses the subject), so a
//     malformed project_id never leaves the process.
//   - list has no paging: the reply holds every entry of the project and
//     fails with too_large (svc.ErrTooLarge) if it exceeds the NATS max
//     payload. With entries near the size limits (64 KiB description,
//     256 KiB parameters) a project of a few dozen tools can pass 8 MiB (and a few tools, the 1 MiB NATS default).
//   - NewServer flushes its subscription to the NATS server it is
//     connected to before returning; in a NATS cluster, interest still
//     takes a moment to reach the other nodes.
//   - A handler that runs past ServerConfig.RequestTimeout fails with
//     internal_error; the client's own deadline usually fires first.
package natsreg
