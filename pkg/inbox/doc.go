// Package inbox is the mesh's inbox service: it receives the reports tool
// services send once a tool.result card is written, keeps one durable entry
// per tool call, and rings the calling agent's wakeup (UTP seed §4.2:
// "write tool.result card → go through report into Inbox → trigger
// cmd.agent.<target>.wakeup").
//
// # Flow
//
// A tool service sends a report (utp.Report JSON) one of two ways:
//
//   - as a svc request on cg.<ver>.<project>.<channel>.svc.inbox.report
//     (OpReport), which the inbox answers once the entry is on disk and
//     the wakeup stored — the Go worker's way, which costs no JetStream
//     write; an ErrRefused reply (code "refused") means dead-lettered, any
//     other failure means "not taken: use the stream";
//   - with JetStream on cg.<ver>.<project>.<channel>.cmd.sys.inbox.report,
//     which the command stream cg_cmd_<ver> captures — CommonGround's way,
//     which works while no inbox runs. The inbox reads it through one
//     durable pull consumer, streams.InboxConsumer, filtered on
//     cg.<ver>.*.*.cmd.sys.inbox.report.
//
// Both are handled the same way, up to Config.Concurrency stream reports
// at once. For each report it:
//
//  1. takes project and channel from the subject and parses the body with
//     utp.ParseReport (unknown fields ignored, inline "result" refused);
//  2. reads the pointed card from the CardStore in that project and accepts
//     the report only if the card exists, is a tool.result, and carries the
//     report's tool_call_id and agent_turn_id (metadata.agent_turn_id);
//  3. in ONE bbolt transaction: looks the (project, agent_turn_id,
//     tool_call_id) up for a duplicate, compares turn_epoch with the turn's
//     highest epoch, and stores a new entry, pending or stale;
//  4. for a pending entry publishes a utp.Wakeup with JetStream on
//     cg.<ver>.<project>.<channel>.cmd.agent.<agent_id>.wakeup (stream
//     cg_wake_<ver>), with header
//     Nats-Msg-Id "wakeup-<inbox_id>", the report's traceparent (a fresh one
//     when it had none), tracestate and CG-Recursion-Depth passed through,
//     and the CG-* identity and envelope headers; waits for the PubAck and
//     queues the wakeup_sent_at mark, which rides along with the next inbox
//     transaction (another report's entry, an ack) instead of an fsync of
//     its own;
//  5. acknowledges the report with a plain Ack (the entry is durable, so an
//     ack the server never receives only causes a redelivery, which is a
//     duplicate), or replies to the request.
//
// The report is acknowledged only after the entry is on disk (bbolt fsyncs
// every commit) and the wakeup is stored by JetStream. Writes of concurrent
// reports, acks and set_epoch calls share one fsync'd transaction (the
// group committer of internal/boltfile).
//
// # Refused reports
//
// A report that can never be accepted (a body that is not a valid report,
// an inline result, a card that does not exist in the project, is not a
// tool.result or belongs to another call or turn) is dead-lettered: a
// DeadLetter record
//
//	{"reason", "subject", "body" (≤ 4 KiB), "received_at", "source": "inbox",
//	 "agent_id"?, "agent_turn_id"?, "tool_call_id"?}
//
// is published with JetStream on cg.<ver>.<project>.<channel>.evt.sys.deadletter.command
// (stream cg_evt_<ver>), a warning naming the reason is logged, and the
// report is terminated (Term). If the record cannot be published the report
// is retried instead: nothing is dropped silently. Transient failures — the
// CardStore unavailable, bbolt or JetStream failing — Nak the report with a
// one-second delay; the consumer has no delivery limit, so it is retried
// until it succeeds.
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
// # Crash windows, and why each is safe
//
//   - Before the entry commits: nothing is stored and the report is not
//     acknowledged; JetStream redelivers it after AckWait.
//   - After the entry commits, before the wakeup is published: the report
//     is redelivered, found to be a duplicate whose wakeup_sent_at is unset,
//     and the wakeup is published then.
//   - After the wakeup is published, before wakeup_sent_at is recorded or
//     the report acknowledged: the redelivered report publishes the wakeup
//     again with the same Nats-Msg-Id; within the stream's two-minute
//     duplicate window JetStream drops it, later the agent may see a second
//     wakeup for the same inbox_id, which it must treat idempotently (the
//     entry, not the wakeup, is the truth: acking twice is a no-op).
//   - After the ack, before the queued wakeup_sent_at mark commits: the
//     entry stays pending without the mark. The wakeup is stored in
//     JetStream, so the agent is woken; the mark only tells a later
//     duplicate report that it need not re-publish (and counts the wakeup
//     for metrics).
//   - After wakeup_sent_at, before the ack arrives: the redelivery is a
//     plain duplicate and is acknowledged.
//   - A report sent as a request, the inbox gone before it replies: the
//     worker gets no answer within 5 s and publishes the report to the
//     stream; the inbox (restarted) finds a duplicate whose wakeup_sent_at
//     may be unset and publishes the wakeup (same Nats-Msg-Id). A worker
//     gone too leaves its command unacknowledged: the redelivery finds the
//     result card and re-reports it. Either way the report is taken before
//     the command is acknowledged (TestSIGKILLUpWithReportsInFlight in
//     cmd/utpmesh kills a whole mesh mid-flight and counts one result, one
//     entry and one stored wakeup per acknowledged call).
//   - A lazy ack answered but not yet committed: the entry stays pending
//     after a crash; the runtime sees the result once more.
//   - A dead-letter record published but the Term lost: the redelivered
//     report is refused again and republished with the same Nats-Msg-Id
//     ("inbox-deadletter-<stream>-<seq>"), which JetStream de-duplicates.
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
// (not_found), ErrInvalid (bad_request) and ErrClosed (closed) through
// Codes; Client does the mapping. The Service offers the same four
// operations as methods for in-process use (see API).
//
// # Storage
//
// Entries live in a bbolt file (Config.Path, fsync on every commit) with a
// schema version; another process holding the file makes New fail with
// ErrLocked after Config.OpenTimeout. Besides the entries, indexes by
// (project, agent_turn_id, tool_call_id) for de-duplication, by (project,
// agent_id) in creation order, and by (project, agent_id) for pending
// entries only keep "list the agent's pending entries" proportional to what
// is pending, not to the agent's history.
//
// In cluster mode the entries live in a JetStream key-value bucket instead
// (Config.Bucket, made by OpenBucket with 3 replicas in a 3-node cluster):
// a write is acknowledged once a majority of the servers stored it, so the
// loss of one node loses nothing, and any number of inbox processes share
// the bucket (the svc queue group and the stream consumer spread the work).
// The layout is in kv.go: the call's dedupe key is created first (the
// first report of a call wins), then the entry and its indexes; a crash in
// between is repaired by the report's redelivery. Entry changes are
// compare-and-set updates, and every read that decides something goes to
// the stream leader (internal/jskv), because a replica may lag. The same
// conformance suite (backend_test.go) runs against the file, the bucket on
// one server and the bucket on a 3-node cluster. A lazy ack is written at
// once there (there is no transaction to ride along with).
//
// # Caveats
//
//   - The bucket keeps one delete marker per acknowledged or stale entry in
//     the agent's pending index; listing pending entries reads them too,
//     so its cost grows with the agent's history until markers are purged
//     (not done yet).
//   - One inbox file, one process. JetStream lets several processes bind
//     the consumer, but each would keep its own file: de-duplication and
//     the svc queries would then see only part of the entries. Run one
//     inbox per mesh (a second one on the same file fails with ErrLocked,
//     which makes it a safe standby that can be restarted once the first
//     has gone).
//   - Entries are kept forever; there is no purge yet. Listing acked,
//     stale or all entries reads the agent's whole history (up to limit
//     matches), and "agent_turn_id" filters after reading.
//   - The card check trusts the CardStore: a report is accepted only if its
//     card is readable at the time; a report that arrives before its card
//     is written is dead-lettered, not retried (tool services write the card
//     first, as the seed requires).
//   - The card's metadata.agent_id is not compared with the report's
//     agent_id; the wakeup goes to the report's agent_id.
//   - The wakeup is a doorbell: the agent reads the entry (list/get) and the
//     tool.result card, and acknowledges the entry with "ack".
package inbox
