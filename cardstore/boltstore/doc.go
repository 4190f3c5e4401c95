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
// transaction holding it has committed and fsync'd.
//
// # Group commit
//
// Put, CreateBox, AppendBox, Claim, Release, DeleteTurn and StartCall
// (of a call without a result) are write requests. A
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
// # File layout (schema version 2)
//
// Every key starts with the project id and a 0x00 byte. Project ids cannot
// contain 0x00 (card.ValidateName), and the store refuses agent_turn_id and
// tool_call_id values that contain 0x00 or are not valid UTF-8
// (ErrInvalid; card validation refuses such an agent_id), so every key
// splits one way only. Buckets:
//
//	cards      project 0x00 card_id                          -> canonical card JSON (card.Encode)
//	turns      project 0x00 agent_turn_id 0x00 seq (8 bytes) -> card_id
//	results    project 0x00 agent_turn_id 0x00 tool_call_id  -> card_id of the tool.result
//	turninfo   project 0x00 agent_turn_id                    -> turn summary JSON (below)
//	turnlist   project 0x00 first_seq (8 bytes)              -> agent_turn_id
//	agentturns project 0x00 agent_id 0x00 first_seq (8 bytes) -> agent_turn_id
//	boxes      project 0x00 box_id                           -> card.Box JSON
//	claims     project 0x00 key                              -> {"holder","token","expires_at"} JSON, or a tombstone {"token","released":true}
//	meta       "schema_version"                              -> "2"
//
// A node's file (OpenShared, pkg/mesh's cards.db) holds other kinds'
// buckets beside these (the inbox's: entries, calls, agents, pending,
// epochs; their version under "inbox_schema_version" in the same meta
// bucket); none collides with the store's.
//
// seq is the big-endian write sequence, from the turns bucket's
// NextSequence: one counter for the whole file, taken in write order, so a
// turn's entries sort in write order and cards of one Put keep their order.
// Every card with metadata.agent_turn_id (tool.call and tool.result always
// have one) gets a turns entry; a tool.result also gets its results entry.
// A repeated put of an identical card writes nothing, index entries
// included.
//
// ListTurn's cursor is this sequence: Next is the sequence of the page's
// last card when more cards follow, and 0 on the last page. Cursors stay
// valid for the life of the file.
//
// The turn summaries serve ListTurns. A turn's turninfo record,
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
// buckets. A schema version 1 file (the same layout without turninfo,
// turnlist and agentturns) is upgraded by Open in one transaction: it
// builds the three buckets from the turns index, reading every indexed
// card once, then sets the version to 2. The upgrade takes time in
// proportion to the number of turn cards; a crash during it leaves the
// version 1 file unchanged, and builds that only read version 1 refuse the
// upgraded file. DB exposes the bbolt handle for consistency checks
// (tx.Check) and hot backups (tx.WriteTo) in read-only transactions.
//
// # Claims and boxes
//
// Lease expiry is judged by the store clock (WithClock, default time.Now)
// at the moment the claim's transaction runs, not when the request was
// made; GetClaim judges Expired by the same clock when it reads. Box created_at and updated_at come from the same clock. Boxes are
// stored whole: an append rewrites the box, so a box near MaxBoxCards
// costs about 600 KiB per append.
//
// StartCall reads first: a call that has a result returns it from a read
// transaction (with no commit, so no fsync), and the card named
// ToolCallCardID is read there too. Otherwise one write request checks
// the results index again and takes the claim in the same transaction,
// so a result and a claim taken after it never coexist.
// StartCallTool (natsstore's tool-scoped start_call) adds ClaimTool's
// rules to the claim.
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
// the call's tool.call card when it is among the turn's last
// CallScanLimit cards (read newest first). The hook writes in the same
// transaction: the inbox stores the call's entry there. An error of the
// hook fails the Put and nothing of it is written (the other requests of
// the shared transaction commit without it). The after func it returns
// runs once the transaction is committed and fsync'd, in the Put's
// goroutine, before Put returns; it must not block (the inbox starts the
// wakeup's publish and returns). So when Put returns, the hook's writes
// are durable. Since a request may run more than once in a shared
// transaction, the hook may too; only the last run's after is run.
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
