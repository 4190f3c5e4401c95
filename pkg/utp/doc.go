// Package utp holds the wire contract of the UTP tool protocol as the mesh
// speaks it: the tool command an agent runtime publishes, the report a tool
// service sends to the inbox, and the wakeup the inbox sends to the agent.
// docs/protocol.md describes the same messages for clients in any language.
//
// # Commands
//
// A tool command travels on the tool's target subject
// (cg.<ver>.<project>.<channel>.cmd.tool.<target>…) or, for PMO built-ins,
// cg.<ver>.<project>.<channel>.cmd.sys.pmo.internal.<tool>. Its body carries
// routing and pointer fields only: the parameters live in the tool.call card
// named by tool_call_card_id. ParseCommand enforces the seed's rules:
//
//   - required: agent_id, agent_turn_id, turn_epoch, tool_call_id,
//     after_execution, tool_call_card_id; for PMO built-ins also step_id and
//     tool_name;
//   - refused: inline args, arguments or result;
//   - ignored: every other field.
//
// Identity fields may also arrive as CommonGround v1r4 CG-* headers
// (HeaderAgentID …). When a field arrives both ways the two values must
// agree, or the command is refused; CG-Project-Id and CG-Channel-Id must
// match the subject.
//
// # Reports and wakeups
//
// A report (tool service → inbox) is published on
// cg.<ver>.<project>.<channel>.cmd.sys.inbox.report and never carries the
// result inline: it points at the tool.result card. A wakeup (inbox → agent)
// is published on cg.<ver>.<project>.<channel>.cmd.agent.<agent_id>.wakeup and
// is a doorbell with the report's pointer fields.
//
// # Tracing
//
// The W3C traceparent header passes unchanged from command to report to
// wakeup. NewTraceparent makes one when a publisher has none.
package utp
