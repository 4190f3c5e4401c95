// Package worker is the tool runtime: it serves a set of tools (Tool: a
// registry definition and a HandlerFunc) from JetStream, one durable pull
// consumer per tool shared by every process serving it, and turns each
// command into exactly one tool.result card and one report to the inbox.
//
// # Serving tools from a program of its own
//
// Serve (blocking until its context ends, then draining) and Start (which
// returns the started Runtime) are the SDK: given a connection — made
// with the worker identity's credentials, see pkg/creds — they make the
// clients of the mesh's CardStore and registry services, build the
// Runtime from Options and serve. A worker outside the mesh process runs
// the authorization gate itself, so they require WithAuthorizer
// (natsauthz.NewRemoteGate is the gate of 'utpmesh up', and brings Cedar
// into the program) or an explicit WithoutAuthorizer. 'utpmesh worker' is
// Start with the CLI's flags. The package imports no server code and no
// tracing library: see ExampleStart.
//
// # One result writer
//
// ResultOf builds a call's tool.result card and its report (body,
// headers); WriteResult stores the card or returns the call's existing
// result; ReportMsgID is the report's JetStream message id. The runtime,
// RequestCancel, pkg/unrouted and catalogue services that answer calls
// later use them, so a result looks the same whoever writes it.
//
// # One command, start to end
//
// Runtime.handle parses the command (utp.ParseCommand) and starts the
// call with one CardStore request (cardstore.Store's StartCall): the
// call's result if it already has one, which it re-reports, else the
// call's claim (its fencing token grows on every take-over and drives the
// poison limit) and the tool.call card, the check and the claim atomic.
// It reads the registry entry (cached with its compiled schema),
// validates the arguments, asks the Authorizer, runs the
// handler under the tool's timeout while renewing the claim and keeping the
// message alive, writes the result card and publishes the report with
// JetStream, and only then acknowledges the command. docs/protocol.md §7
// describes what a caller observes.
//
// # Shutdown
//
// Stop stops the consumers, lets the calls in flight finish until its
// context ends, then cancels them: each ends with a canceled result that is
// written and reported, and a call that was claimed but had not started
// its handler yet ends canceled without running. A call still busy
// Config.CancelGrace after its cancel (a handler that ignores it, a store
// call that never returns) is abandoned: its command, never acknowledged,
// is redelivered. Stop then returns an error wrapping ErrDrainTimeout,
// which callers treat as a clean stop.
//
// # Retrying a call
//
// A handler whose error wraps ErrRetryLater gets no result: the claim is
// given back and the command redelivered after 2 s, as when the CardStore
// is unreachable. It is for an outcome the handler cannot report truthfully
// yet (a change committed whose receipt could not be written); the handler
// must be safe to run again.
//
// # Observability
//
//   - Discovery: Start registers the NATS micro service "utpmesh-worker"
//     (ServiceName) with one endpoint per tool; the endpoint describes the
//     tool and its STATS data are the tool's ToolStats (docs/protocol.md
//     §2.7). Stop unregisters it after the drain.
//   - Metrics: Config.Observer receives every call event (pkg/metrics turns
//     them into Prometheus metrics); nil costs one pointer test per event.
//   - Traces: Config.Tracer makes the utp.command, utp.execute and
//     utp.report spans (telemetry.NewWorkerTracer implements it with
//     OpenTelemetry; the runtime itself imports no tracing library); the
//     report's traceparent names the utp.report span. Without a Tracer the
//     command's traceparent and tracestate pass on to the report unchanged.
//   - Logs: every line about a call carries tool_name, tool_call_id,
//     agent_turn_id, agent_id and project_id.
//
// # Limits
//
// A result too large for the CardStore (cardstore.ErrTooLarge) does not
// lose the call: it becomes a failed result with internal_error naming the
// size, and a failure too large (a huge message or detail) is cut the same
// way.
//
// # Caveats
//
//   - The micro service is core NATS: a worker killed with SIGKILL leaves
//     discovery at once, and its calls come back through JetStream
//     redelivery and claim take-over.
//   - The describe endpoint answers from the runtime's registry cache
//     (Config.EntryCacheTTL, default 5 s), so a just-changed entry may show
//     its previous version for that long.
package worker
