// Package unrouted answers tool commands that no tool serves. A command on
// cg.<ver>.<project>.<channel>.cmd.tool.<target>[.<token>…] that no worker
// consumes and no registered tool of the project targets would otherwise
// wait in the command stream until it ages out (24 h) with no answer.
//
// The Sweeper runs in the mesh core (pkg/mesh starts one), off the hot
// path: every Interval it reads the command stream's per-subject message
// counts under cmd.tool.> (one stream-info request), and looks only at the
// subjects that
//
//   - no durable consumer of the stream matches with one of its filter
//     subjects (NATS wildcards: "*" one token, ">" one or more; an
//     unfiltered durable matches everything). A worker's durable consumer
//     covers its tool's subject, exactly, in every project, whether or not
//     its process is running. Ephemeral consumers are readers, not
//     servers (an operator's `nats stream view`), and the sweeper itself
//     reads with direct message gets, never a consumer, so no read makes a
//     subject look served; and
//   - no registry entry of the subject's project targets exactly (a tool
//     that is registered but has no worker running waits for its worker:
//     it is never answered here; cmd.tool.echo.extra is not echo's).
//
// Each command on such a subject that is older than Grace (so a worker
// that is starting has time to create its consumer and register) is
// answered: a failed tool.result card with error code not_found and a
// message naming the subject and the project's registered targets nearest
// to it, then a report to the inbox, which wakes the agent; a command too
// malformed to address a result becomes a dead-letter event
// (evt.sys.deadletter.command, source "unrouted"). Either way the command
// is then deleted from the stream, so it is answered once. A command is
// thus answered between Grace and Grace + Interval after it was stored
// (30–40 s with the defaults), plus the time of the sweep itself.
//
// A target token outside the subject token rules (cmd.tool.ech%0) is
// answered the same way; a subject whose project or channel token is
// invalid cannot address a result or a dead letter: the sweeper logs it
// once and leaves it to age out.
//
// A call that already has a result is re-reported, not answered again; a
// call whose claim someone holds is left for the next sweep. An error on
// one subject (a store that does not answer) does not stop the sweep of
// the others.
package unrouted
