// Package natsstore serves a cardstore.Store over core NATS request-reply and
// provides Client, a cardstore.Store that talks to such a server. Agent
// runtimes and tool workers in other processes reach the CardStore only
// through it.
//
// Requests go to cg.<ver>.<project_id>.<channel_id>.svc.cardstore.<op>; the
// project in the subject scopes the request, so a request on project A's
// subject can neither read nor write project B's cards. docs/protocol.md
// lists every operation with its request and reply bodies.
//
// tool.result cards are written with op put_result, never put (put
// refuses a batch holding one with ErrWrongOp, wire code wrong_op); Client
// picks the op by itself. The split lets NATS permissions keep agent
// identities, which may put their own cards, from writing results
// (internal/meshauth, docs/security.md). put_result's reply carries
// "inbox_entry": true when the served store stored the calls' inbox
// entries in the results' commit (a single node: cardstore.EntryPutter,
// which Client implements with PutWithEntry); a worker told so sends no
// report.
//
// Tool workers start calls (start_call: the call's result, or its claim
// and tool.call card, in one request), claim, release and write results
// on their tool's own subjects,
// cg.<ver>.<project_id>.<channel_id>.svc.cardstore.<op>.<tool>
// (subjects.ToolService), which NATS lets only that tool's worker
// identity (and the core, admin) publish. The server checks such a write
// against the store (ToolStore): the call's tool.call card and the result
// must be of the subject's tool, and a result must be written under the
// call's claim (holder and fencing token, sent in "claim"), taken on the
// same tool's subject. Refusals are cardstore.ErrForbidden (wire code
// forbidden), or cardstore.ErrClaimLost for a claim taken over, and each
// forbidden one is published as an audit record (internal/audit). Client
// uses these subjects when the context names the tool
// (cardstore.WithTool) or it holds the call's tool-scoped claim; the
// plain claim, release and put_result are the core's and admin's.
// start_call has no plain subject: Client.StartCall without a tool in its
// context fails with cardstore.ErrInvalid. Leases
// on other keys (a service's own: ATLAS's scheduler, state holders) are
// named <service>/… and use claim_key, release_key and get_claim on the
// service's subject, svc.cardstore.<op>.<ToolToken(service)>, which only
// that service's worker identity (and the core, admin) may publish; the
// server refuses (forbidden, audited) a tool call's key or a key of
// another service there. Client picks them for any key not of the form
// toolcall/…; a key with no service goes to the plain claim_key and
// release_key, the core's and admin's.
//
// Agent runtimes read and write on their agent's own subjects,
// cg.<ver>.<project_id>.<channel_id>.svc.cardstore.<op>.<agent>
// (subjects.AgentService; NewAgentClient), the only ones a per-agent
// identity may publish: there the server serves that agent's cards, turns
// and boxes only (AgentOps says what is the agent's) and refuses anything
// else with cardstore.ErrForbidden, audited. The agent-scoped ops and the
// tool-scoped ops are disjoint, so the op says how the last token reads.
//
// Caveats:
//   - One Put over NATS holds the cards of one project (the subject's). The
//     local store accepts mixed batches; the client refuses them.
//   - Claim leases travel in whole milliseconds.
//   - A reply must fit one NATS message (8 MiB in `utpmesh up`). A
//     list_turn or get_many page of many large cards can exceed it; the
//     request then fails with cardstore.ErrTooLarge and the caller asks for
//     a smaller page (ListTurnRequest.Limit, fewer ids).
package natsstore
