// Package inbox is the contract of the mesh's inbox: the entries it keeps
// (one per tool call whose result a tool service reported), their states,
// the API an agent uses (list, get, ack, lazy ack, set_epoch), the Backend
// interface its storage implements, the sentinel errors and the wire
// bodies of its svc operations. It imports nothing beyond nats.go and the
// protocol packages, so the agent SDK can depend on it.
//
// The inbox receives the reports tool services send once a tool.result
// card is written, keeps one durable entry per tool call, and rings the
// calling agent's wakeup (UTP seed §4.2: "write tool.result card → go
// through report into Inbox → trigger cmd.agent.<target>.wakeup").
//
// # Packages
//
//	inbox       this contract
//	inboxsvc    the service: consumes reports, checks their cards, stores
//	            entries, publishes wakeups, serves the svc operations; it
//	            takes a Backend its caller opened (and closes)
//	natsinbox   the agent's client of the svc operations (inbox.API)
//	boltinbox   Backend in a bbolt file (one node)
//	kvinbox     Backend in a JetStream key-value bucket (cluster mode)
//	inboxtest   the conformance suite every Backend runs
//
// # States
//
//	pending  stored, wakeup published (or about to be); waiting for the agent
//	acked    the agent acknowledged it (svc "ack")
//	stale    its turn_epoch is older than the turn's highest; wakes no one
//
// pending → acked and pending → stale are the only transitions.
//
// # Epochs and staleness
//
// The inbox keeps each turn's epoch per (project, agent_turn_id), raised
// only by the svc operation "set_epoch", which an agent runtime calls when
// it starts a new epoch of a turn (after a restart, say). Epochs never go
// down. A report with an epoch lower than the turn's is stored stale and
// wakes no one; any other report is pending, and a report never moves the
// epoch: any worker may report, and one report of a huge epoch would
// otherwise silence every later result of the turn. set_epoch also turns
// the turn's pending entries of older epochs stale, so a runtime declares a
// new epoch with set_epoch before it dispatches at it.
//
// # De-duplication
//
// One entry per (project, agent_turn_id, tool_call_id), the seed's callback
// deduplication anchor. A second report of the same call — a redelivery, or
// a tool service retrying — is acknowledged without a new entry or wakeup
// (logged at debug), whatever its epoch or body. The dedupe check and the
// insert are one write request, applied in order within the shared
// transaction, so two copies handled at the same moment cannot both insert.
//
// # Service operations
//
// The svc service "inbox" answers on cg.<ver>.<project>.<channel>.svc.inbox.<op>
// (core NATS request-reply, package svc); the subject's project scopes every
// operation, so a request on project B's subject can neither see nor change
// project A's entries:
//
//	list       {"agent_id", "agent_turn_id"?, "state"? (pending|acked|stale|all, default pending),
//	            "limit"? (default and max 1000), "after"? (inbox_id cursor)}
//	           → {"entries": [Entry…]} in creation order
//	get        {"inbox_id"} → {"entry": Entry}
//	ack        {"inbox_ids": [...], "lazy"?} (1–1000) → {"acked": n}, n = entries that were pending;
//	           an unknown id fails the whole call (not_found, naming it); acked or
//	           stale entries are left as they are. lazy: reply before the disk
//	           (reads show the entries acked at once; the ack is written with the
//	           next transaction; a crash before that leaves them pending)
//	report     a report body (see above) → {"inbox_id", "state"}
//	set_epoch  {"agent_turn_id", "turn_epoch"} → {"turn_epoch": highest now}
//
// Errors are svc error replies whose codes map back to ErrNotFound
// (not_found), ErrInvalid (bad_request), ErrClosed (closed) and ErrRefused
// (refused) through Codes; natsinbox.Client does the mapping.
// inboxsvc.Service offers the same operations as methods for in-process
// use (both implement API).
package inbox
