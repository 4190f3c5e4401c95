// Package kvinbox keeps the inbox's entries in a JetStream key-value
// bucket: the inbox.Backend of a clustered mesh (pkg/mesh opens it with
// OpenBucket and New and hands it to inboxsvc.Config.Backend).
//
// The bucket (made by OpenBucket with 3 replicas in a 3-node cluster)
// acknowledges a write once a majority of the servers stored it, so the
// loss of one node loses nothing, and any number of inbox processes share
// it (the svc queue group and the stream consumer spread the work). The
// layout is at the top of kvinbox.go: the call's dedupe key is created
// first (the first report of a call wins), then the entry and its indexes;
// a crash in between is repaired by the report's redelivery. Entry changes
// are compare-and-set updates, and every read that decides something goes
// to the stream leader (internal/jskv), because a replica may lag. A lazy
// ack is written at once (there is no transaction to ride along with), and
// so is the wakeup-sent mark, in the background.
//
// Listing reads only what the page needs: one turn's entries through the
// turn's index keys; an agent's entries through its index keys, streamed
// by the bucket's key lister (one ordered consumer, not a request per
// key) and read in inbox id order (UUIDv7: creation order) until the page
// is full. An ack or set_epoch drops the entry's pending key without a
// trace (a stream purge of the key, jskv.Bucket.Drop), so the pending
// index holds only pending entries; DeleteTurn (retention) drops a turn's
// keys the same way.
//
// Caveat: buckets written before this version keep a delete marker on
// every pending key acked then; the key lister passes over them on the
// server, at stream speed (`nats kv` can purge old markers).
package kvinbox
