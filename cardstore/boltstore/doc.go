// Package boltstore is the local cardstore.Store: cards, boxes and claims
// in one bbolt file, written with group commit so that many concurrent
// writers share one fsync.
//
//	s, err := boltstore.Open("/var/lib/utpmesh/cards.db")
//	if err != nil {
//		return err // ErrLocked when another process has the file
//	}
//	defer s.Close()
//
// Every rule of the cardstore package holds (immutability, one result per
// call, project isolation, atomic puts, durable writes); cardstore/storetest
// is the suite that checks them, and this package runs it with group commit
// on and off.
//
// # Durability
//
// The file is opened with fsync on (bbolt's NoSync is never set), mode
// 0600, the hash-map freelist, and a lock timeout (5s by default,
// WithOpenTimeout): a second process opening the same file gets ErrLocked
// rather than hanging. A write method returns nil only after the bbolt
// transaction holding it has committed and fsync'd, with one exception by
// design: the claims of calls kept in memory (see "Call claims").
//
// # Group commit
//
// Put, CreateBox, AppendBox, Release, DeleteTurn, and Claim and
// StartCall except the in-memory claims of calls (see "Call claims") are
// write requests. A
// request that finds the store idle commits at once, in the caller's
// goroutine: there is no batching delay (bbolt's own DB.Batch waits up to
// 10 ms for company; it is not used) and a lone writer pays no goroutine
// hand-off. Requests that arrive while a commit is in flight queue up; when
// it ends, one committer goroutine commits everything queued (at most 256
// requests, or until 16 MiB of card bytes) in one transaction, and repeats
// until the queue is empty. So the number of fsyncs grows with the commit
// rate the disk allows, not with the number of writers. The committer (and
// the open with its lock timeout and schema check) is internal/boltfile's,
// shared with the inbox.
//
// Requests that share a transaction stay independent. Each one checks
// everything that can fail (conflicts, results, held claims, missing
// cards) before it writes anything, so a request that fails leaves no
// trace and the others commit; a request that fails after it started
// writing (which needs an I/O or internal error) makes the committer roll
// the transaction back and run the others again without it. Only when the
// commit itself fails (a disk error) do all its requests get that error.
// Requests in one transaction see each other's writes in queue order: two
// different results for one tool call in one transaction are still one
// success and one ErrResultExists.
//
// Validation and canonical encoding (card.Encode) of a Put run in the
// caller's goroutine before the request is queued; only the checks against
// stored data and the writes run in the shared transaction.
//
// Cancellation: a request whose context ends while it is queued returns
// ctx.Err() and is skipped; once its transaction has started it completes
// and reports the real outcome. Close refuses new requests with
// cardstore.ErrClosed, waits for every request already accepted to be
// committed, then closes the file; it is idempotent.
//
// WithGroupCommit(false) runs every write request in a transaction of its
// own (bbolt serialises them); it exists to measure what group commit
// gains.
//
// Reads (Get, GetMany, ListTurn, ListTurns, FindToolResult, GetBox,
// GetClaim) run in bbolt read transactions, concurrently with each other
// and with the writer. Cards are decoded inside the transaction in one
// pass (card.Parse), which copies what it keeps, so nothing returned
// refers to the file's memory map.
//
// # File layout (schema version 4)
//
// Every key starts with the project id and a 0x00 byte. Project ids cannot
// contain 0x00 (card.ValidateName), and the store refuses agent_turn_id and
// tool_call_id values that contain 0x00 or are not valid UTF-8
// (ErrInvalid; card validation refuses such an agent_id), so every key
// splits one way only. Buckets:
//
//	cards      project 0x00 card_id                           -> canonical card JSON (card.Encode)
//	turnrecs   project 0x00 agent_turn_id 0x00 + one of:      every record keyed by a turn:
//	             's' seq (8 bytes)                            -> card_id: the turn's cards in write order
//	             't'                                          -> turn summary JSON (below)
//	             'c' tool_call_id 0x00 'r'                    -> card_id of the call's tool.result
//	             'c' tool_call_id 0x00 'k'                    -> the claim of the call's cardstore.CallKey (below)
//	turnlist   project 0x00 first_seq (8 bytes)               -> agent_turn_id
//	agentturns project 0x00 agent_id 0x00 first_seq (8 bytes) -> agent_turn_id
//	boxes      project 0x00 box_id                            -> card.Box JSON
//	claims     project 0x00 key                               -> the claim of a key that is not a call's
//	outbox     project 0x00 agent_turn_id 0x00 tool_call_id   -> OutboxEntry JSON: the command of a call without a result (outbox.go)
//	meta       "schema_version"                               -> "4"
//	           "boot_epoch", "closed_epoch", "lock_delay"     -> decimal numbers (see "Call claims")
//
// A claim is {"holder","token","expires_at","tool","epoch"} JSON, or a
// tombstone {"token","released":true,"epoch"}.
//
// Why one bucket for a turn's records: a commit pays the disk for every
// page it dirties (about 20 µs a page on the reference machine), and each
// bucket it touches costs its whole path from root to leaf. The result of
// a call writes the turn index, the result index, the claim's tombstone
// and the turn summary: under one prefix they share one path, and a call's
// result and claim share one leaf (docs/performance.md, schema 4).
//
// A node's file (OpenShared, pkg/mesh's cards.db) holds other kinds'
// buckets beside these (the inbox's: entries, calls, agents, pending,
// epochs; their version under "inbox_schema_version" in the same meta
// bucket); none collides with the store's.
//
// seq is the big-endian write sequence, from the turnrecs bucket's
// NextSequence: one counter for the whole file, taken in write order, so a
// turn's entries sort in write order and cards of one Put keep their order.
// Every card with metadata.agent_turn_id (tool.call and tool.result always
// have one) gets an index entry; a tool.result also gets its result entry.
// A repeated put of an identical card writes nothing, index entries
// included.
//
// ListTurn's cursor is this sequence: Next is the sequence of the page's
// last card when more cards follow, and 0 on the last page. Cursors stay
// valid for the life of the file.
//
// The turn summaries serve ListTurns. A turn's summary,
// {"first_seq","agent_id","first_at","last_at","cards","tool_calls",
// "tool_results"}, is updated by the Put that writes the turn's cards, in
// the same (group-commit) transaction, once per turn and Put. first_seq is
// the seq of the turn's first card and never changes, so the turnlist
// entry written with the turn's first card keeps the turn's place in the
// newest-first order, and ListTurns reads a page by walking turnlist
// backwards from its Before cursor (a first_seq, exclusive). agent_id is
// the first agent_id any of the turn's cards names; the agentturns entry
// is written when it becomes known, under the turn's first_seq, so a
// filtered page is one backward walk too.
//
// Open refuses (ErrSchemaVersion) a file whose meta bucket names another
// schema version, and a bbolt file without a meta bucket that has other
// buckets. Files of older versions are upgraded by Open in one
// transaction, with the version bump (upgrade.go); a crash during it
// leaves the old file unchanged, and builds that only read an older
// version refuse the upgraded file:
//
//   - version 3 (turns, results and turninfo buckets of their own, the
//     claims of calls in claims): the records move to turnrecs under their
//     new keys, the write sequence with them, and the three buckets are
//     deleted. It takes time and memory in proportion to the turn records.
//   - version 2 (no outbox): the same, and an empty outbox.
//   - version 1 (no turn summaries and lists): the same, then the summaries
//     and lists are built from the turn index, reading every indexed card
//     once.
//
// The outbox (PutWithCommand, Outbox) holds the command of each call
// whose tool.call card was stored with it and that has no result yet: the
// Put of the call's tool.result card deletes the entry in its
// transaction, as DeleteTurn deletes a turn's. A node whose command stream
// acknowledges before its fsync publishes the entries again after a crash
// (pkg/mesh). An entry holds the message as published, headers included,
// so a command's mandate (CG-Mandate) is in the file until the call has
// its result, as it is in the command stream. DB exposes the bbolt handle for consistency checks
// (tx.Check) and hot backups (tx.WriteTo) in read-only transactions.
//
// # Claims and boxes
//
// Lease expiry is judged by the store clock (WithClock, default time.Now)
// at the moment the claim is decided (in its transaction, or under its
// call's lock), not when the request was made; GetClaim judges Expired by the same clock when it reads. Box created_at and updated_at come from the same clock. Boxes are
// stored whole: an append rewrites the box, so a box near MaxBoxCards
// costs about 600 KiB per append.
//
// StartCall reads first: a call that has a result returns it from a read
// transaction (with no commit, so no fsync), and the card named
// ToolCallCardID is read there too. Otherwise, under the call's lock (see
// "Call claims"), it checks the results index again and takes the claim,
// so a result and a claim taken after it never coexist.
// StartCallTool (natsstore's tool-scoped start_call) adds ClaimTool's
// rules to the claim.
//
// # A command before its card
//
// The single-node admission (pkg/admit, Config.PublishBesideCard) writes
// a new call's tool.call card and publishes its command side by side, so
// a worker may start the call before the card's commit has ended. The
// admission announces the Put first, with the card (AnnouncePut: an
// in-memory registry of the cards whose Put is queued or committing,
// released once the Put has returned; a card the Put would refuse is not
// announced). A StartCall or StartCallTool that does not find the
// ToolCallCardID card looks for an announced Put of it and reads again;
// while one is announced it waits for it (its context bounds the wait),
// then reads the card and decides as usual, the tool check included.
// natsstore serves this store, so remote workers wait the same way. The
// lock-delay's "born after the boot" rule reads the call's first
// tool.call card after that wait, so a card that lands during a
// StartCall counts (its turns index sequence is newer than the boot).
//
// StartCallEarly, for the worker that runs in the store's own process
// (pkg/mesh's in-process worker), does not wait: it starts the call on
// the announced card of that very call at once (a copy of it). The
// call's result is never stored before its card: until the card's Put
// has stored it, the call is remembered with the announcement, and the
// result's transaction stores the card first when it does not find it
// (its Put not yet queued, or failed). Reads are unchanged: a Get of a
// card whose commit has not ended says not found. Only a worker that
// dies with the store may start early: after a crash before the card's
// commit, the lock-delay (which knows a call by its stored card) would
// not hold a second worker back from a call a surviving first one still
// runs.
//
// With WithDispatchLinger the card's commit (PutWithCommand) waits up to
// the linger for another write to share it (internal/boltfile's
// Committer.WriteSoon): when the worker of a quick tool answers within
// it, the card, the claim and the result are one commit. The caveat: the
// in-process worker may act before the call's card is durable. A crash
// between the start and the card's commit kills that worker and loses
// the card with the call's claim and result, and the agent, which had no
// answer to its dispatch, sends it again, so the tool may run twice, the
// first run (cut short by the crash, or done) with no durable trace. A
// crash after a durable card and before the result costs the same second
// run, as it always did.
//
// Putting a new tool.result card ends the claim on its call's
// cardstore.CallKey, whoever holds it, in the same transaction: the claim
// is replaced by a tombstone that keeps the last fencing token, so a
// later claim of the key (a manual one) gets a larger token and is no
// take-over. The worker needs no separate release write, and dead claims
// do not pile up. A tombstone is no claim: GetClaim says ErrNotFound and
// Release ErrClaimLost. A live worker whose claim was ended this way (it
// lost a race to another worker's result) finds the result when it puts
// its own (ErrResultExists) and re-reports it.
//
// Every call has its own claim key (cardstore.CallKey escapes '/' and
// '%' in the agent_turn_id), so calls whose ids join alike with "/" never
// share a claim. The rules (claims, boxes, Put's checks, turn summaries)
// are cardstore's; this package stores.
//
// # Call claims
//
// The claims on call keys (keys cardstore.ParseCallKey reads: StartCall,
// StartCallTool, and Claim or ClaimTool renewals and take-overs of such a
// key) whose lease is at most the lock-delay (WithLockDelay, default
// DefaultLockDelay = 5 s, pkg/worker's default lease) live in the store's
// memory and become durable with the next commit: they are written by a
// boltfile.Committer.Later write, which rides along with the next
// transaction, whoever starts it, or commits alone after 100 ms. A
// worker's call therefore costs no commit of its own for its claim: at
// c=1 the claim of an echo call is ended by its tool.result's commit
// before it was ever written (BenchmarkStartCall: 2 commits per call
// before, 1 after). Every other claim (service leases, longer leases) is
// written at once, as before.
//
// Every decision on a call key runs under the key's lock, from the read
// of its state to the record of the new one: the table's record when it
// has one, else the bucket's. A Put of tool.result cards holds the locks
// of its calls from before its write until its commit has ended, so
// StartCall's "no result yet" check and its claim are atomic, and the
// result's transaction ends (and fences, PutToolResult) the claim the
// table holds. GetClaim reads the table first, without waiting for a lock.
// Release and DeleteTurn see in-memory claims; Release is always a
// durable write. The write of in-memory claims takes each record as it
// is when its transaction runs, and skips keys whose lock is held (their
// holder is deciding, or its own transaction writes the key); a record
// changed after the write stays due. So the write never puts back a claim
// a result ended or a renewal replaced. A write that fails leaves its
// claims in memory (they still hold) and is tried again with the next
// commit; Close writes them before it closes.
//
// A crash loses the claims not yet written. Three things protect the
// calls they held, whose workers (in other processes) may still run them:
//
//   - The boot epoch: Open counts every open of the file in the meta
//     bucket (boot_epoch, in one transaction, logged; BootEpoch), and
//     every claim record written carries the epoch of the run that
//     decided it (cardstore.ClaimRecord.Epoch). Close records a clean
//     close (closed_epoch) when no claim is left only in memory; the next
//     Open has no lock-delay then. A file without a boot epoch (new, or
//     last written by a build that kept every claim durable) has none
//     either.
//   - The lock-delay (Chubby's): after an Open that follows an unclean
//     end, for the longer of this run's lock-delay and the crashed run's
//     (meta lock_delay), a call born before the boot (its first tool.call
//     card has a turns index sequence from before the Open) whose record
//     was not written by this run may not be granted to a holder, except
//     the renewal of a written live claim by its holder before its lease
//     ends: no first claim, take-over, claim after a tombstone, or renewal
//     of a lapsed lease. The refusal is a *cardstore.ClaimHeldError
//     (holder RestartedHolder, expiry the end of the lock-delay), which a
//     worker answers with a nak until then. Every lost claim had a lease
//     of at most the crashed run's lock-delay from a decision before the
//     crash, so it has lapsed when the lock-delay ends, and its holder's
//     renewals are refused meanwhile (its handler is canceled). Calls
//     born after the boot are not delayed. LockDelayUntil tells when it
//     ends.
//   - The fence: holders are unique per execution (pkg/worker:
//     InstanceID/seq), and a result under a claim must name the holder
//     and token of the call's current record, so a worker whose claim was
//     lost cannot write (PutToolResult: ErrClaimLost, also when the store
//     restarted uncleanly and has no claim for the call at all). The
//     fence reads the key's one current record (the table's, else the
//     bucket's), so a result checked against a record of an earlier
//     epoch while a newer claim lives in memory cannot happen. The epoch
//     does not enter the token, which keeps counting take-overs for
//     pkg/worker's poison limit.
//
// What it costs: calls in flight at a crash of the store's process stall
// for at most one lock-delay (then run once more, by one worker, if their
// result was not written). A call claimed in memory that crashes the
// store's own process before its claim is written (within the Later
// delay) is not counted toward poison detection: the claim, and so its
// token, is lost with the process. A call with no tool.call card (a
// hand-made claim on a toolcall/ key) has no durable birth to compare and
// is not delayed; the mesh writes every call's card before its command.
// The renewal a written live claim's holder may make during the
// lock-delay is safe when the holder renews with one lease (pkg/worker
// does): then no take-over could have been decided in memory before its
// written lease ended. A holder that shortened its lease in memory
// before the crash could see a take-over lost, and run beside the taker.
//
// # A shared file and the result hook
//
// OpenShared opens the store on a bbolt file the caller opened
// (internal/boltfile.Open) and writes it through the caller's committer,
// which other kinds of the file share: on a single node the inbox keeps
// its entries in the CardStore's file, so their writes and the store's
// share transactions and fsyncs. The caller configures the committer
// (observer, logger) and closes it, then the file, after Close.
//
// WithResultHook(h) calls h.ResultStored inside the transaction that
// stores a new tool.result card (by Put or PutToolResult; not for a
// repeat of a stored card, nor for a second result the store refuses),
// after the card, its indexes and the end of its claim are written, with
// the call's tool.call card: the one with the id the admission gives it
// (utp.CallRef.CallCardID, one read), else the newest among the turn's
// last CallScanLimit cards (a raw-mode runtime's). The hook writes in the same
// transaction: the inbox stores the call's entry there. An error of the
// hook fails the Put and nothing of it is written (the other requests of
// the shared transaction commit without it). The after func it returns
// runs once the transaction is committed and fsync'd (and the Put has
// let its calls' claim locks go), in the Put's goroutine, before Put
// returns; it must not block (the inbox starts the
// wakeup's publish and returns). So when Put returns, the hook's writes
// are durable. Since a request may run more than once in a shared
// transaction, the hook may too; only the last run's after is run. A
// non-nil after says the hook stored (or found) the call's inbox entry:
// PutWithEntry and PutToolResultEntry (cardstore.EntryPutter; natsstore's
// put_result reply, inbox_entry) return true when every tool.result card
// of the write was new and got one, and the worker then sends no report.
//
// # Caveats
//
//   - One process per file: bbolt holds an exclusive lock while the store
//     is open. Serve the store to other processes over NATS
//     (cardstore/natsstore).
//   - The card size limit (WithMaxCardBytes) can only be lowered below
//     cardstore.DefaultMaxCardBytes, never raised: cards must fit in one
//     NATS message.
//   - Release deletes the claim, so the next claim on the key starts again
//     at Token 1 (as cardstore.ClaimRequest specifies); fencing tokens only
//     grow across take-overs and result tombstones, not across Release and
//     re-claim. (The worker releases before a retry precisely so that the
//     retry does not count toward its poison limit, which reads the token.)
//   - Free pages (DeleteTurn's, retention's) are reused but the file
//     never shrinks; compact it offline with `utpmesh compact`
//     (internal/boltfile.Compact).
package boltstore
