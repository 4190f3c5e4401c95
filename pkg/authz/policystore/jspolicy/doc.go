// Package jspolicy keeps each project's Cedar policy set, its history and
// its authorization config in a JetStream key-value bucket: the policy
// store of cluster mode, which every node reads and writes and which
// survives the loss of a node. It is storage only (a policystore.Backend):
// the rules — validation, versions, base checks, rollback, config
// defaults — are policystore.Versioned's, shared with the bbolt boltpolicy,
// and both pass policystoretest.
//
// # Decision
//
// Cluster mode keeps the mesh's state on JetStream KV — replicated (R3 in
// a cluster: a write is acknowledged once a majority of the bucket's
// replicas stored it), with per-key compare-and-set by revision — because
// it is the engine the mesh already depends on. bbolt (boltpolicy) stays
// the embedded default of a single-node mesh.
//
// # Layout
//
// One bucket (Config.Bucket, default DefaultBucket) whose per-key history
// is the policy history (Config.HistoryLimit, default 20, at most 64):
//
//	policies.<project>   the current authz.PolicyDoc (JSON); its kept
//	                     revisions are the kept versions
//	config.<project>     the authz.ProjectConfig (JSON)
//
// Keeping the versions as the key's revisions makes a new version and its
// history entry one write: there is no moment at which the current set
// and the history disagree, and JetStream drops the oldest revision when a
// key has more than the limit.
//
// # Writes
//
// policystore.Versioned validates the text first (syntax, schema, and with
// Config.Actions the project's tools); the bucket's Update then runs a
// compare-and-set loop: read the current document from the stream leader,
// let Versioned decide (check base for ReplacePolicies and Rollback,
// compare the text's SHA-256: a put of the stored text changes nothing),
// and write version+1 with kv.Update naming the revision read. When another
// writer got there first the loop reads again, so a put without base is
// never lost and a put with base is refused with authz.ErrConflict once
// the version it was based on is no longer current (policy rollback keeps
// this rule). PutConfig replaces the whole config, so it is a plain put
// (last writer wins, as in bbolt).
//
// # Reads
//
// Every read goes to the stream leader: Policies and Config read the key's
// latest revision, History and PolicyVersion walk its kept revisions. So
// they see every write acknowledged before them, through any node
// (TestClusterReadAfterWrite, on a 3-node cluster). Config.DirectReads
// makes Policies and Config — the gate's two reads on every call —
// JetStream direct gets instead: cheaper, answered by the nearest replica,
// which in a cluster may not have a write made through another node yet.
//
// # Caveats
//
//   - Changing HistoryLimit changes the bucket's per-key history; lowering
//     it drops the oldest kept versions of every project.
//   - Close does not close the NATS connection (later calls fail with
//     authz.ErrClosed); a closed connection makes every call fail with
//     authz.ErrClosed too.
//   - Issuer keys are not here: they stay in the mandate.KeyDir files.
//   - No change notification: the bbolt store offers none either (the gate
//     re-reads the policy document per call and reparses only a new
//     version), so a KV watcher would have nothing to feed.
package jspolicy
