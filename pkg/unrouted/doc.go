// Package unrouted answers tool commands that no tool serves. A command on
// cg.<ver>.<project>.<channel>.cmd.tool.<target> whose target no worker
// consumes and no registered tool of the project has would otherwise wait
// in the command stream until it ages out (24 h) with no answer.
//
// The Sweeper runs in the mesh core (pkg/mesh starts one), off the hot
// path: every Interval it reads the command stream's per-subject message
// counts under cmd.tool.> (one stream-info request), and looks only at the
// subjects that
//
//   - no consumer of the stream filters on (a worker's durable consumer
//     covers its tool's subject in every project, whether or not its
//     process is running), and
//   - no registry entry of the subject's project targets (a tool that is
//     registered but has no worker running waits for its worker: it is
//     never answered here).
//
// Each command on such a subject that is older than Grace (so a worker
// that is starting has time to create its consumer and register) is
// answered: a failed tool.result card with error code not_found and a
// message naming the subject and the project's registered targets nearest
// to it, then a report to the inbox, which wakes the agent; a command too
// malformed to address a result becomes a dead-letter event
// (evt.sys.deadletter.command, source "unrouted"). Either way the command
// is then deleted from the stream, so it is answered once.
//
// A call that already has a result is re-reported, not answered again; a
// call whose claim someone holds is left for the next sweep.
package unrouted
