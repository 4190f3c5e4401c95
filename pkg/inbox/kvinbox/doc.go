// Package kvinbox keeps the inbox's entries in a JetStream key-value
// bucket: the inbox.Backend of a clustered mesh (pkg/mesh opens it with
// OpenBucket and New and hands it to inboxsvc.Config.Backend).
//
// The bucket (made by OpenBucket with 3 replicas in a 3-node cluster)
// acknowledges a write once a majority of the servers stored it, so the
// loss of one node loses nothing, and any number of inbox processes share
// it (the svc queue group and the stream consumer spread the work). The
// layout is at the top of kvinbox.go: the call's dedupe key (the first
// report of a call wins), the entry and its indexes are created in one
// atomic batch, one replicated write that is stored whole or not at all;
// where it cannot be (a bucket on a server without atomic batches, a
// batch refused or unanswered), the dedupe key is created first, then the
// entry and its indexes, and a crash in between is repaired by the
// report's redelivery. Entry changes
// are compare-and-set updates, and every read that decides something goes
// to the stream leader (internal/jskv), because a replica may lag. A lazy
// ack is written at once (there is no transaction to ride along with), and
// so is the wakeup-sent mark, in the background.
//
// Listing reads what the page needs, with leader reads and stream info
// requests, no consumer (list.go): one turn's entries (the agent's Resume,
// `turns resume`) and an agent's pending entries (a runtime resuming
// after a restart, `turns ls --pending`) from the index keys of the turn
// or of the agent's pending entries, listed by one stream info request,
// in inbox id order (UUIDv7: creation order); the agent's other listings
// (acked history, every entry) by walking its agent keys in the order
// they were written, from the cursor's key on, one leader read per key
// (jskv.Bucket.Next), until the page is full. An insert creates an
// entry's index keys once (a report's redelivery never rewrites one), so
// an entry keeps its place, and a page followed while entries are added,
// acked or reported again repeats nothing and skips nothing that was
// there throughout (inboxtest's paging cases). An ack or set_epoch drops
// the entry's pending key without a trace (a stream purge of the key,
// jskv.Bucket.Drop), so the pending index holds only pending entries;
// DeleteTurn (retention) drops a turn's keys the same way.
//
// What a listing costs: a turn's, its own entries; a pending list, the
// agent's pending entries; a history page, its entries plus, for each,
// the server passing over the messages written between two of the
// agent's keys (other agents' entries of the bucket, the entry's own
// keys); a walk that reaches the agent's newest entry passes over what
// follows it once. Nothing of it follows the agent's history length
// (docs/performance.md, "Inbox listing at 10⁵ entries").
//
// Upgrade: a bucket written by the versions before this one has the same
// keys and lists as it is. Its pending keys acked then keep a delete
// marker each; a pending listing drops a marker the first time it reads
// the acked entry behind it, and the first Pending (the mesh's status and
// metrics) drops them all.
package kvinbox
