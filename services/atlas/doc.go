// Package atlas holds what the ATLAS tool services share: their dependencies
// (Deps), their group names and data files.
//
// ATLAS is a personal-assistant catalogue (tasks, notes, calendar, workflows,
// notifications) specified in the ATLAS tools seed. Each group is one tool
// service, runnable alone ("utpmesh worker atlas.tasks") and included in
// "utpmesh up":
//
//	atlas.tasks      TASK_CREATE TASK_LIST TASK_UPDATE TASK_DELETE
//	atlas.notes      NOTE_CREATE NOTE_SEARCH NOTE_GET NOTE_DELETE
//	atlas.calendar   CALENDAR_GET_DAY CALENDAR_CREATE_BLOCKS CALENDAR_DELETE_BLOCKS
//	atlas.workflows  WORKFLOW_SAVE WORKFLOW_DELETE WORKFLOW_ENABLE WORKFLOW_RUN
//	                 WORKFLOW_LOGS, and the cron scheduler
//	atlas.utility    LOG_EVENT NOTIFY_USER NOTIFY_LIST ATLAS_CONFIRM ATLAS_CANCEL
//
// Every tool's command subject is cg.<ver>.<project>.<channel>.cmd.tool.
// atlas.<group>.<TOOL_NAME>. The machinery every group shares lives in
// internal/kit: deterministic ids and times, the group's state scoped by
// project, per-call idempotency, the confirmation lifecycle, undo steps and
// receipts. docs/protocol.md ("ATLAS") is the wire contract;
// docs/catalogues/atlas.md lists every tool with an example.
//
// # State
//
// Deps.State says where a group keeps its data (services/state, the
// tool services' state engine):
//
//   - StateBolt (default): the local bbolt file DBPath. One process serves
//     the group: it holds a lease in the CardStore (project _atlas, key
//     atlas/state/<group>, renewed every 10s, lapsing 30s after its holder
//     died), and a second process that serves the group against the same
//     mesh from another data directory or host refuses to start with an
//     error naming the holder (pid, host, data directory) and saying to
//     run one worker or use the replicated state. A restart on the same
//     host and data directory takes the lease over at once.
//   - StateJetStream: the JetStream KV bucket atlas_<group>, R1 or R3
//     (Deps.StateReplicas), shared by every worker of the group: two
//     workers of atlas.tasks serve one task list. Transactions are
//     optimistic and serializable per project (services/state/kvstate).
//
// Every worker of a group uses one mode: a worker of the replicated mode
// reads the bolt holder's lease and records the mode in the bucket
// (kvstate.ModeKey), a bolt worker reads that record once it holds the
// lease; either refuses to start beside the other (state.ErrModeMismatch),
// saying which flag to use.
//
// The workflow scheduler runs each scheduled run once across all
// schedulers that share the workflows: the run is recorded in the same
// transaction that advances next_run, and executed under the run's
// CardStore claim (package workflows).
//
// # Caveats
//
// With the bolt state, a service built before its mesh is up (Deps.Resolve)
// takes its lease once the mesh is; if another process holds it then,
// every call of the service fails upstream_unavailable with the holder's
// name instead of the start failing. The lease guards processes that use
// the same mesh's CardStore; two meshes never share a group's data anyway.
package atlas
