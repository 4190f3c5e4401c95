// Package jsstore is the replicated cardstore.Store of cluster mode: cards,
// turn indexes, results, claims and boxes in one JetStream stream, which
// every node of a NATS cluster sees and which, with three replicas, loses
// nothing acknowledged when a node is lost.
//
//	s, err := jsstore.Open(ctx, nc, jsstore.Config{Replicas: 3})
//	if err != nil {
//		return err
//	}
//	defer s.Close()
//
// Every rule of the cardstore package holds (immutability, one result per
// call, project isolation, atomic puts, durable writes, claims with
// fencing tokens and tombstones); cardstore/storetest is the suite that
// checks them, and this package runs it on a single server with direct
// reads, on a single server with the read paths of a replicated stream
// forced on, and on a 3-node cluster with three replicas. Any number of
// Stores, in any processes, may share one stream: they are one CardStore.
// Serve it to processes without JetStream access with cardstore/natsstore:
// several CardStore servers, each with a Store of its own on the one
// stream, share the requests in natsstore's queue group, and the suite
// passes through them too.
//
// # Why JetStream, not PostgreSQL
//
// Cluster mode keeps its state on JetStream (R3) because the mesh already
// depends on it: the command and event streams are JetStream streams, so
// a cluster that runs the mesh runs JetStream, and the CardStore on the
// same engine adds no server to deploy, back up, secure or watch, no
// second failure domain and no second quorum. JetStream gives what the
// Store needs: per-subject compare-and-set
// (Nats-Expected-Last-Subject-Sequence) for immutable cards, the one
// result per call and claims, atomic batch publishing (ADR-50, nats-server
// 2.12 and later; stream setting allow_atomic) for a Put's cards and
// indexes, and per-subject rollup for records that change. What it does
// not give — secondary indexes, reverse scans, transactions that read —
// the layout below builds from those primitives. bbolt (cardstore/boltstore)
// stays the embedded default of `utpmesh up`. The cost is measured in
// docs/performance.md and by this package's benchmarks.
//
// # Layout
//
// One stream (Config.Stream, default "utpmesh_cards"; StreamConfig has its
// settings) holds every project, under subjects that start with the stream
// name. <project> is the project id (a subject token already), <card_id>
// the canonical UUID; every other id (turn, call, agent, claim key, box)
// is written as its base64url encoding without padding, which uses only
// [A-Za-z0-9_-], so ids with dots, wildcards, spaces or slashes map to
// one token each and no two ids share one.
//
//	<stream>.c.<project>.<card_id>       canonical card JSON                                    once (expected last sequence 0)
//	<stream>.t.<project>.<turn>          {"ids":[…]}: the turn's cards of one Put, in Put order  appended
//	<stream>.s.<project>.<turn>          turn summary {"agent_id","first_at","last_at","cards","tool_calls","tool_results"}  compare-and-set, rollup
//	<stream>.l.<project>                 {"turns":[…],"prev":seq}: turns one Put started           compare-and-set on the newest
//	<stream>.a.<project>.<agent>         the same, for the turns whose agent one Put learnt      compare-and-set on the newest
//	<stream>.r.<project>.<turn>.<call>   card id of the call's tool.result                     once
//	<stream>.k.<project>.<key>           claim {"holder","token","expires_at","tool","format"} or tombstone {"token","released":true}  compare-and-set, rollup
//	<stream>.b.<project>.<box_id>        card.Box JSON                                          compare-and-set, rollup
//
// A Put is one atomic batch: its new cards, one turn index record per
// turn, its results' index records, a tombstone on each result's claim
// key (ending the claim; written even when the key has no live claim, so
// that a claim taken since the Put read the key makes the batch fail and
// the Put end that claim too), the new summaries and the list records,
// every record that must not
// exist (cards, results) or must not have changed since it was read
// (summaries, list heads, claims) guarded by an expected last subject
// sequence. The server applies the whole batch or none of it, and a
// replica shows it whole or not at all, so no reader ever sees half a Put.
// A Put that loses a compare-and-set to a concurrent writer reads again and
// retries; a Put that finds a conflicting card or a different result fails
// with ErrConflict or ErrResultExists and writes nothing. Identical
// repeats write nothing.
//
// The turn list records form a chain from the newest back (prev), so
// ListTurns walks a project's turns newest first one record at a time;
// guarding each new record by the newest one serialises the Puts that
// start new turns in one project (Puts to existing turns do not wait for
// each other, except on the same turn). Positions are opaque cursors:
// ListTurn's is the stream sequence of a turn index record and the card's
// index in it, ListTurns' the sequence of a list record and the turn's
// index in it (seq<<10 | index); they stay valid for the life of the
// stream.
//
// # Group commit
//
// An atomic batch costs the server much more than its messages (a
// single-replica file stream stages every batch in a file store of its own
// and fsyncs it; BenchmarkServerBatch measures it), so the Puts of one
// Store share batches: a Put that finds the store idle commits at once in
// its goroutine; Puts that arrive meanwhile queue, and one goroutine then
// commits them together (up to 900 messages and 16 MiB of cards; a bigger
// Put goes alone) and repeats until none are left. Each queued Put is checked against the stored records and the
// Puts before it, so one that fails is left out and the others commit;
// when the batch fails for a reason that is not a compare-and-set, each
// Put is retried alone, so that its error is its own. A Put whose context
// ends while it is queued returns the context's error and is skipped.
//
// # Deleting a turn
//
// DeleteTurn (retention) purges the turn's subjects: summary first (the
// turn leaves ListTurns, which skips list entries without a summary),
// then its cards, results and claim tombstones, and its turn index last,
// so a delete cut short is finished by the next one. The list records
// keep naming the turn; a turn id written again after its deletion is
// listed at both places (retention deletes turns idle past its limit,
// whose ids are not reused in practice).
//
// # Reads and replicas
//
// On a single-replica stream every read is a direct get (ADR-31): one
// round trip, batches of a turn's index and multi-subject gets of up to
// 1000 cards in one request. On a replicated stream direct gets may be
// answered by a follower that has not yet applied the latest writes, so
// records that change (summaries, list heads, claims, boxes) are read from
// the stream leader (STREAM.MSG.GET), which has applied everything
// acknowledged; immutable records are read directly and only a "not found"
// is confirmed at the leader (a Put's own checks skip that: its batch
// expects those records absent, so a stale answer only makes the server
// refuse the batch, and the Put is planned again). A group commit's plan
// reads everything it depends on at once: the cards and results in one
// multi-subject direct get, the claims from the leader in parallel, and,
// on its first attempt, the summaries and list heads in one direct get
// too — they are guarded by the batch's compare-and-set, so a follower's
// stale answer only fails the batch, and every later attempt reads them
// from the leader. A ListTurn page first asks the leader for
// the turn's newest index record and reads the page again while a
// follower's answer stops short of it. So a read sees every write
// acknowledged before it started, on any number of replicas.
//
// # Durability and claims
//
// A write returns nil once JetStream has acknowledged it: on one server,
// after the server stored it (fsync'd before the acknowledgement only with
// sync_interval: always, which embednats sets); with three replicas, after
// a quorum of two stored it. Lease expiry and box times use Config.Clock,
// the clock of the process running the Store: several Stores on one stream
// (the CardStore servers of a cluster) need clocks that agree to well
// within the shortest lease. StartCall claims first and then reads the
// call's result (see its documentation for why this order is atomic).
// Releasing a claim writes a tombstone with
// token 0 (the next claim starts at 1, as boltstore's delete does); a
// result's tombstone keeps the token.
//
// # Resending
//
// Every JetStream request goes in attempts of Config.AttemptTimeout
// (default 2 s) within its whole bound (the caller's deadline, or
// Config.RequestTimeout): one left unanswered — the stream leader died
// with it in flight, or its acknowledgement was lost — is sent again, and
// reaches the new leader once one is elected. Reads are resent as they
// are. Writes may be because each is a compare-and-set (a Put's batch
// holds at least one card expected absent) and nats-server's new leader
// applies the lost leader's log before it takes a write: a copy of a
// write that was stored fails its expectation and stores nothing. What
// the write did is then read back: a Put plans again and finds its cards
// (an identical Put is a no-op that succeeds), a single record is
// compared with the stored one, and a write still unanswered at its
// deadline is read back once more; only when that does not find it does
// it fail, with ErrUnavailable and "may or may not be stored". So a
// write is stored at most once, and reported failed only when it was not
// seen stored (TestResendLostAck, TestResendUnknownUntilDeadline,
// TestResendLeaderLoss).
//
// # Tool-scoped writes
//
// Store implements natsstore's ToolStore (ClaimTool, ReleaseTool,
// StartCallTool, PutToolResult) with boltstore's rules and errors, so a
// CardStore server checks a worker's writes with them; storetest.RunTools
// is the suite both stores run. A claim keeps its tool in its record.
// PutToolResult is a Put whose planning checks each new result's claim
// (holder, fencing token, tool) and guards the claim's tombstone in the
// batch by the sequence of the record it checked: the check and the write
// are one atomic batch, and a take-over in between makes the batch fail
// and the Put judge again (ErrClaimLost). Claim records written before
// the tool had a field of its own (no "format"; the tool in the holder as
// "tool:<tool>/<holder>", as natsstore's generic checks wrote them) are
// read as that tool's and holder's.
//
// # Caveats
//
//   - The server must allow atomic batches big enough for a Put: a Put of
//     n cards needs up to 6n+1 messages (MaxBatchMessages for 1000 cards).
//     nats-server's default max_batch_size (1000) takes a Put of up to 996
//     cards of one turn, and every Put the mesh makes; a bigger one fails
//     with ErrTooLarge naming the setting (jetstream { limits {
//     max_batch_size: 6001 } }). The server's max_payload must exceed the
//     card limit (1 MiB) plus the record headers.
//   - Starting a turn serialises on the project's turn list (see above):
//     BenchmarkNewTurn measures it.
//   - The agent filter of ListTurns orders turns by the Put that first
//     named their agent: a turn whose first cards named no agent takes
//     its place in the agent's list when a later card names one (boltstore
//     keeps it at its first card). The unfiltered list is ordered by first
//     card.
//   - Old versions of changing records are removed by rollup; cards,
//     index and list records are kept forever (limits retention without
//     limits). A project's data is removed with two stream purges by
//     subject filter: <stream>.*.<project>.> and <stream>.l.<project>.
//   - A box is rewritten whole on every append (up to about 600 KiB).
package jsstore
