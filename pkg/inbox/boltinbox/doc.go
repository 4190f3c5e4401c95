// Package boltinbox keeps the inbox's entries in a bbolt file: the
// inbox.Backend of a single-node mesh. Open gives the inbox a file of its
// own; OpenShared puts it in a file it shares with the CardStore (a
// node's file: pkg/mesh opens <DataDir>/cards.db with boltfile.Open and
// one committer for both, and hands the inbox to
// inboxsvc.Config.Backend). Its buckets do not collide with the
// CardStore's, and its schema version is kept under SchemaKey in the
// file's meta bucket.
//
// In a shared file the inbox's ResultHook (set on the CardStore with
// boltstore.WithResultHook) stores a call's entry in the transaction that
// stores its tool.result card: inbox.ReportOfResult builds the report the
// worker would send from the result and the call's tool.call card, and
// Insert's transaction (de-duplication, stale rule) stores it; once the
// commit is durable the hook's Announcer (inboxsvc.Service) rings the
// wakeup. The worker's report then finds the entry with a read
// transaction: Insert looks for the call's entry before it writes, so a
// report of a call that has one costs no commit. Migrate moves the
// entries of a data directory's former inbox.db into the shared file once,
// in one transaction, and renames the file inbox.db.migrated.
//
// The file (fsync on every commit) has a schema version; another process
// holding it makes Open fail with ErrLocked after the timeout. Besides the
// entries, indexes by (project, agent_turn_id, tool_call_id) for
// de-duplication, by (project, agent_id) in creation order, and by
// (project, agent_id) for pending entries only keep "list the agent's
// pending entries" proportional to what is pending, not to the agent's
// history; listing one turn's entries reads the turn's dedupe keys
// (which share a prefix), not the agent's history. DeleteTurn
// (retention) removes a turn's entries and keys in one transaction. The
// layout is at the top of boltinbox.go.
//
// Writes of concurrent reports, acks and set_epoch calls share one fsync'd
// transaction (the group committer of internal/boltfile); the wakeup-sent
// mark and lazy acks ride along with the next transaction instead of
// paying an fsync of their own (reads overlay a queued lazy ack, so an
// entry reads acked from the moment its ack was answered). A crash before
// that commit leaves the entry pending (the runtime sees the result once
// more) or without its mark (a redelivered report re-publishes the wakeup
// under the same Nats-Msg-Id).
//
// One file, one process: de-duplication and the queries see only the
// entries of the file, so run one inbox per file (a second one fails with
// ErrLocked, which makes it a safe standby). Check verifies a closed file.
package boltinbox
