// Package telemetry sets up OpenTelemetry tracing for a utpmesh process and
// carries W3C trace context through NATS headers.
//
// # Tracing is off unless asked for
//
// Setup returns a no-op TracerProvider when no OTLP endpoint is configured
// (neither Config.Endpoint nor OTEL_EXPORTER_OTLP_ENDPOINT /
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT in the environment). A no-op provider
// records nothing and exports nothing; spans started from it only carry the
// parent's span context along, so the mesh's traceparent headers look
// exactly as they do without telemetry. With an endpoint, spans are batched
// and sent with OTLP over HTTP (protobuf).
//
// # Spans of one tool call
//
//	utp.command   worker: one delivery of a tool command; parent = the
//	              command's traceparent header
//	  utp.execute worker: the tool handler
//	  utp.report  worker: writing the tool.result card and publishing the
//	              report; the report's traceparent names this span
//	utp.wakeup    inbox: handling the report and ringing the wakeup;
//	              parent = the report's traceparent
//
// All four share the trace id of the traceparent the caller sent with the
// command (or the one the worker made when it had none). Attributes:
// tool_name, tool_call_id, agent_turn_id, project_id and, once known,
// status.
//
// # Propagation
//
// Header (a propagation.TextMapCarrier over nats.Header) and Extract/Inject
// use the W3C trace-context format only: traceparent and tracestate, the
// header names the mesh already uses (nats.Header is case-sensitive; both
// are lower case).
//
// # Caveats
//
//   - Spans are exported in batches; a process killed with SIGKILL loses
//     the batch it had not sent. Shutdown (from Setup) flushes.
//   - An unreachable collector costs nothing on the call path: the batch
//     exporter drops spans after its queue fills (2048 spans).
package telemetry
