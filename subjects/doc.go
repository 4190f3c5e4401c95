// Package subjects implements the UTP subject grammar of the utpmesh tool
// service mesh: parsing, validation, classification, builders for the
// well-known subjects, wildcard patterns for subscriptions, and the subject
// templates used in tool definitions.
//
// # Grammar
//
// Every message subject has the shape
//
//	cg.<ver>.<project_id>.<channel_id>.<category>.<component>.<target>[.<suffix>…]
//
// The first token is literally "cg". <ver> is the protocol version
// (DefaultVersion, currently "v1r3"); <project_id> and <channel_id> scope the
// message; <category> selects the transport; <component> names the kind of
// addressee; <target> names the addressee; everything after the target is
// the suffix, zero or more tokens, whose meaning depends on the subject.
//
// # Categories
//
//   - cmd: commands, captured by the JetStream command stream ("cmd.>").
//   - evt: events, captured by the JetStream event stream ("evt.>").
//   - str: ephemeral streams on core NATS (no persistence).
//   - svc: request-reply services of the mesh itself on core NATS.
//
// For cmd, evt and str the component is one of agent, sys, user, tool.
//
// # The svc category
//
// The mesh's own request-reply services (CardStore, registry, inbox…) use
//
//	cg.<ver>.<project_id>.<channel_id>.svc.<service>.<op>
//
// with the service name in the component position, the operation in the
// target position and no suffix. In a Subject the service name is stored in
// the Component field (an arbitrary token, not one of the four component
// constants) and the operation in Target.
//
// svc exists because a request sent on a cmd subject would be captured by
// the JetStream command stream, whose store acknowledgement would arrive in
// the requester's reply inbox before (or instead of) the service's answer.
// Services must therefore never listen under cmd.>, and no stream may
// capture svc.>.
//
// # Tokens
//
// Every token, including ver, project_id, channel_id, target and each suffix
// token, is non-empty, at most MaxTokenLen (128) bytes long, and made of the
// characters [A-Za-z0-9_-] only. Dots separate tokens; the NATS wildcards
// "*" and ">", white space and any other byte are rejected, so a parsed
// Subject is always concrete. Token errors are reported as *TokenError
// naming the role of the token ("prefix", "ver", "project_id",
// "channel_id", "category", "component", "target", "suffix[N]", and for svc
// subjects "service" and "op") and the reason ("empty", "too long (…)",
// "invalid character 'x' at byte N", an unknown category or component, or a
// misplaced template placeholder). Byte offsets are relative to the start of
// the token.
//
// # Well-known subjects
//
//	cmd.tool.<target>[.<suffix>…]     KindToolCommand  ToolCommand
//	cmd.sys.pmo.internal.<tool>       KindPMOInternal  PMOInternal
//	cmd.sys.inbox.report              KindInboxReport  InboxReport
//	cmd.agent.<agent_id>.wakeup       KindAgentWakeup  AgentWakeup
//	svc.<service>.<op>                KindService      Service
//	evt.sys.deadletter.command        KindDeadLetter   DeadLetter
//	evt.<component>.<target>[…]       KindOther        Event
//
// (each prefixed with cg.<ver>.<project_id>.<channel_id>.). Classification
// by Kind is exact: cmd.sys.pmo.internal.x.y or cmd.agent.a.wakeup.now are
// KindOther.
//
// # Patterns
//
// AllCommands, AllEvents, ToolCommandPatterns, PMOInternalPattern,
// InboxReportPattern, WakeupPattern and ServicePattern return wildcard
// strings for NATS subscriptions and JetStream filters. They fix the
// version and use "*" for project and channel, so one worker serves every
// project and channel. A tool worker needs both patterns returned by
// ToolCommandPatterns because ">" matches one or more tokens, never zero.
//
// # Templates
//
// Tool definitions written in the CommonGround YAML style carry subject
// templates such as
//
//	cg.{ver}.{project_id}.{channel_id}.cmd.tool.web_search
//
// "{ver}" or "{PROTOCOL_VERSION}" may appear only in the ver position,
// "{project_id}" only in the project position and "{channel_id}" only in the
// channel position; concrete tokens are allowed there too. The rest of the
// template must be a valid concrete subject. Render fills the placeholders;
// a concrete project or channel in the template cannot be overridden.
//
// # Caveats
//
//   - The version token is validated as a token only; this package does not
//     reject versions other than DefaultVersion. Callers decide which
//     versions they accept.
//   - Tokens are case-sensitive: "CMD" is not a category and "Tool" is not a
//     component.
//   - Subject.Suffix is nil, not empty, when there is no suffix; builders
//     copy their variadic suffix arguments.
//   - Kind, PMOTool and AgentID do not validate; use them on subjects from
//     Parse or the builders.
//   - The 128-byte token limit does not bound the whole subject; NATS
//     servers impose their own limits on total subject and payload size.
//   - Parse is on the per-message hot path: it uses no regular expressions,
//     scans the subject once and allocates only for a suffix.
package subjects
