// Package boltinbox keeps the inbox's entries in a bbolt file: the
// inbox.Backend of a single-node mesh (pkg/mesh opens <DataDir>/inbox.db
// with Open and DefaultOpenTimeout and hands it to inboxsvc.Config.Backend).
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
