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
// internal/kit: deterministic ids and times, bbolt storage scoped by project,
// per-call idempotency, the confirmation lifecycle, undo steps and receipts.
// docs/protocol.md ("ATLAS") is the wire contract; docs/catalogues/atlas.md
// lists every tool with an example.
//
// # Caveats
//
// Each group keeps its data in a local bbolt file (DBPath). Several workers
// of one group must therefore share one data directory on one host, or each
// serves a different copy of the data; bbolt's file lock lets only one
// process open a file, so in practice run one worker per group and data
// directory. The workflow scheduler also claims each scheduled run in the
// CardStore, so two schedulers that do share a workflow never both run it.
package atlas
