package utp

// Span names and attribute keys of a call's trace. A call's spans follow it
// through the traceparent header (HeaderTraceparent): the tool runtime's
// command span (parent: the command's traceparent), its execute and report
// spans, and the inbox's wakeup span (parent: the report's traceparent).
// pkg/worker names its spans with them through its Tracer hook, and
// pkg/telemetry records them with OpenTelemetry.
const (
	SpanCommand = "utp.command" // one delivery of a command
	SpanExecute = "utp.execute" // the tool's handler
	SpanReport  = "utp.report"  // writing the result and sending the report
	SpanWakeup  = "utp.wakeup"  // the inbox taking a report and ringing the wakeup

	AttrToolName    = "tool_name"
	AttrToolCallID  = "tool_call_id"
	AttrAgentTurnID = "agent_turn_id"
	AttrProjectID   = "project_id"
	AttrStatus      = "status"
)
