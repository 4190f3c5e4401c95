// Package jsreg is a registry.Registry kept in a JetStream key-value
// bucket: the registry of cluster mode, which every node of the mesh reads
// and writes, and which survives the loss of a node.
//
// # Decision
//
// Cluster mode keeps the mesh's state on JetStream KV — replicated (R3 in
// a cluster: a write is acknowledged once a majority of the bucket's
// replicas stored it), with per-key compare-and-set by revision — because
// it is the engine the mesh already depends on: no second database to run,
// back up and secure. bbolt (boltreg) stays the embedded default of a
// single-node mesh. Both pass registrytest.
//
// # Layout
//
// One bucket (Config.Bucket, default DefaultBucket) with one revision per
// key. The key of an entry is
//
//	<project_id>.<tool_name with every "." written "=">
//
// (tool names may contain dots and never contain "="; so "demo" /
// "artifact.put" is key demo.artifact=put), and the value is the entry's
// JSON (registry.Entry, with updated_at), as boltreg stores it. A project's
// keys are exactly those matching <project_id>.> — "p" never sees "p-1".
//
// # Writes
//
// Put and Delete are compare-and-set loops: read the key's latest revision
// from the stream leader, write with kv.Update (kv.Delete with
// LastRevision) naming that revision, and start again when another writer
// got there first (internal/jskv). So two concurrent Deletes of one entry
// give one success and one ErrNotFound, and updated_at never goes back for
// one key even when nodes' clocks disagree: Put stamps
// max(its clock, the stored updated_at). A write that loses 50 times in a
// row fails with an error saying so, rather than spin.
//
// # Reads
//
// Get and List read from the stream leader (List walks the project's keys,
// one request per entry), so they see every write acknowledged before
// them, through any node: TestClusterReadAfterWrite puts through one node
// of a 3-node cluster and reads through the other two at once. A
// JetStream direct get would be cheaper but is answered by the nearest
// replica, and there it returned the previous entry.
//
// # Change notification
//
// Not offered: neither boltreg nor natsreg notifies of changes today
// (workers cache entries for a TTL and drop them on refresh_config), so
// there is nothing for a KV watcher to feed yet.
//
// # Caveats
//
//   - Close does not close the NATS connection; a closed connection makes
//     every call fail with registry.ErrClosed.
//   - An entry must fit in one NATS message (the server's max_payload).
//   - The bucket's replica count is Config.Replicas; a single server
//     refuses more than 1, and the error says so.
package jsreg
