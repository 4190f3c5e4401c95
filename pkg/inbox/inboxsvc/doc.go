// Package inboxsvc is the mesh's inbox service: it consumes the reports
// tool services send once a tool.result card is written, checks each
// against its card, keeps one entry per tool call in an inbox.Backend
// (Config.Backend), rings the calling agent's wakeup and serves the svc
// operations of package inbox (whose doc describes entries, states, epochs
// and de-duplication).
//
// # The backend belongs to the caller
//
// The service neither chooses nor opens its storage, and imports no
// storage engine: the caller opens a Backend — a boltinbox.DB on one node
// (pkg/mesh: boltinbox.OpenShared in the node file <DataDir>/cards.db,
// which it shares with the CardStore; the file fails to open with
// ErrLocked while another process holds it), or a
// kvinbox.KV on the replicated bucket in cluster mode — passes it in
// Config.Backend, and closes it after Stop has returned. Stop leaves the
// backend open; Close then writes what is still queued (wakeup marks, lazy
// acks). After Stop the service's own methods fail with inbox.ErrClosed.
// Several services may share one kvinbox bucket; a boltinbox file has one.
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
//     report's tool_call_id, agent_turn_id (metadata.agent_turn_id) and
//     status (content.status);
//  3. in ONE backend write (Backend.Insert; one bbolt transaction): looks
//     the (project, agent_turn_id, tool_call_id) up for a duplicate, compares turn_epoch with the turn's
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
// tool.result, belongs to another call or turn, or has another status) is
// dead-lettered: a
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
// # An entry stored with its result (a node's file)
//
// When the backend shares the CardStore's file (boltinbox.OpenShared, its
// ResultHook attached to the Service: pkg/mesh on one node), the entry of
// a call is stored in the transaction of its tool.result card, and, once
// that commit is durable, Announce publishes its wakeup in the background
// (step 4 above, without a report; a new entry counts as
// OutcomeAccepted), retrying a failed publish (1 s, doubling to 30 s)
// until it is stored or the service stops. The CardStore tells the
// worker the entry is stored (cardstore.EntryPutter, put_result's
// inbox_entry), and the worker sends no report. A report that comes
// anyway (a foreign worker's, a re-report of an existing result) finds
// the entry (created=false) without a commit. Whoever publishes an
// entry's wakeup — Announce or a report's handler — holds it "in flight"
// until the wakeup-sent mark commits; a report of an entry in flight
// waits for that publish and, once it succeeded, answers (counted
// OutcomeDuplicate) without publishing again; a failed one makes the
// report publish it. Both ways run one tail, ring. Results the hook makes
// no entry for (inbox.ReportOfResult's refusals) take the report's way.
//
// # Wakeups are doorbells: ringing at start
//
// With no report, nothing is redelivered to ring a wakeup a crash lost
// between the result's commit and the wakeup's publish. So Start, with a
// backend that can list them (boltinbox.DB.Unrung), rings in the
// background every pending entry stored before the start whose
// wakeup_sent_at is unset: a page of 256 keys of the pending index per
// read transaction, one publish at a time on ring's path (retried like
// Announce's), then one log record with the count. The publish carries
// Nats-Msg-Id "wakeup-<inbox_id>": a wakeup stored within the stream's
// two-minute duplicate window is not stored again; later the agent may
// be woken twice, and its ack of the entry makes the second a no-op
// (issue 27 decision 4: every acknowledged call's entry is durable and
// its agent woken at least once). The kvinbox backend (cluster mode) has
// no such scan and needs none: its entries come only with reports, whose
// redelivery (or the worker's stream fallback) rings them.
//
// # Crash windows, and why each is safe
//
//   - Before the entry commits: nothing is stored and the report is not
//     acknowledged; JetStream redelivers it after AckWait.
//   - After the entry commits, before the wakeup is published: the report
//     is redelivered, found to be a duplicate whose wakeup_sent_at is unset,
//     and the wakeup is published then. An entry stored with its result
//     (no report) is rung by the next Start.
//   - After the wakeup is published, before wakeup_sent_at is recorded or
//     the report acknowledged: the redelivered report publishes the wakeup
//     again with the same Nats-Msg-Id; within the stream's two-minute
//     duplicate window JetStream drops it, later the agent may see a second
//     wakeup for the same inbox_id, which it must treat idempotently (the
//     entry, not the wakeup, is the truth: acking twice is a no-op).
//   - After the ack, before the queued wakeup_sent_at mark commits: the
//     entry stays pending without the mark. The wakeup is stored in
//     JetStream, so the agent is woken; the mark only tells a later
//     duplicate report and the next Start that they need not re-publish
//     (and counts the wakeup for metrics).
//   - After wakeup_sent_at, before the ack arrives: the redelivery is a
//     plain duplicate and is acknowledged.
//   - A report sent as a request, the inbox gone before it replies: the
//     worker gets no answer within 5 s and publishes the report to the
//     stream; the inbox (restarted) finds a duplicate whose wakeup_sent_at
//     may be unset and publishes the wakeup (same Nats-Msg-Id). A worker
//     gone too leaves its command unacknowledged: the redelivery finds the
//     result card and re-reports it. Either way the report is taken before
//     the command is acknowledged; on a single node the entry is stored
//     with the result before it, and the next Start rings it
//     (TestSIGKILLUpWithReportsInFlight in cmd/utpmesh kills a whole mesh
//     mid-flight and counts one result, one entry and a stored wakeup per
//     acknowledged call).
//   - A lazy ack answered but not yet committed: the entry stays pending
//     after a crash; the runtime sees the result once more.
//   - A dead-letter record published but the Term lost: the redelivered
//     report is refused again and republished with the same Nats-Msg-Id
//     ("inbox-deadletter-<stream>-<seq>"), which JetStream de-duplicates.
//
// # Caveats
//
//   - With a kvinbox backend, package kvinbox says what a listing costs.
//   - One inbox file, one process. JetStream lets several processes bind
//     the consumer, but each would keep its own file: de-duplication and
//     the svc queries would then see only part of the entries. Run one
//     inbox per mesh (a second one opening the same file fails with
//     boltinbox.ErrLocked, which makes it a safe standby that can be
//     restarted once the first has gone).
//   - Entries are kept until retention deletes their turn (pkg/retention).
//     A listing reads an index (the turn's, the agent's pending entries,
//     the agent's history from the cursor on) until the page is full, not
//     the agent's whole history: see the backend packages.
//   - The card check trusts the CardStore: a report is accepted only if its
//     card is readable at the time; a report that arrives before its card
//     is written is dead-lettered, not retried (tool services write the card
//     first, as the seed requires).
//   - The card's metadata.agent_id is not compared with the report's
//     agent_id; the wakeup goes to the report's agent_id (to the card's
//     when the entry came with the result: a report naming another agent
//     then finds that entry).
//   - The wakeup is a doorbell: the agent reads the entry (list/get) and the
//     tool.result card, and acknowledges the entry with "ack".
package inboxsvc
