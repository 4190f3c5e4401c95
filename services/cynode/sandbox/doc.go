// Package sandbox is the CyNodeAI sandbox tools: sandbox.create, exec,
// put_file, get_file, stream_logs, destroy, and
// sandbox.allowed_images.list|add. A sandbox belongs to a job of a task
// (job_id must be a job of task_id); it is a work directory and a user id
// of its own, and every exec runs in a fresh bubblewrap (bwrap)
// container: all namespaces unshared (no network: only its own loopback),
// private /proc, /dev and /tmp, the work dir at /work, a cleared
// environment. The system tree is either the host's /usr read-only (the
// built-in image, builtin:host-usr) or an image the operator imported
// into the local image store (internal/imagestore: a docker save archive
// or an OCI image layout, unpacked to <data>/images/<image id>/rootfs)
// bound read-only as /; either way the image must be in the allowed
// images. The process runs as the sandbox's own unprivileged uid
// (200000-299999, derived from task and job; with an imported image the
// host's setpriv is bound in at /.cynode to drop to it). Memory,
// processes and CPU are limited by a cgroup v2 of the exec's own
// (memory.max, pids.max, cpu.max; killed whole at the end) where the
// service can delegate those controllers, otherwise by rlimits; each
// result says which (limits_enforced_by). CPU time, file size, open
// files, a wall-clock timeout and an output cap apply either way, and
// the container dies with the service. Sandbox directories left behind by
// a crash are removed when the service starts. The tools have scope pm
// (sandbox agents never get them).
//
// # Locality: a sandbox lives on one node
//
// A sandbox is a directory (and, for a service that is not root, a holder
// process) of the cynode worker process that created it, and every cynode
// worker consumes the one durable of each sandbox tool, so a call on a job's
// sandbox may reach a worker that does not hold it. Each worker is a node
// with a name (NodeFile under its data directory, generated once) and an
// incarnation (random, per process). sandbox.create records, in the KV
// bucket Bucket that every worker shares, which node and incarnation hold
// the job's sandbox (compare-and-set: one create wins across the mesh). A
// call that reaches another worker is forwarded, as a NATS request with the
// call's deadline, to the holder on its node subject
// (subjects.NodeService: cg.<ver>.<project>.<channel>.svc.cynode.node.<node>,
// served by the holder's micro service MicroService); the holder runs it
// with its own limits and answers the result or the error, and the worker
// that took the call writes the tool.result under its claim as for any
// call.
//
// Why forwarding, not routing the command itself to the holder: the call
// keeps the protocol's one path (one durable per tool, one claim, one
// result card written by the worker that claimed it), so exactly one
// result holds as for every other tool; a per-node durable would need a
// second command subject per node, its own redelivery and a core that
// knows nodes. The cost is one NATS round trip between two workers, and
// a forwarded exec that the receiving worker abandons (its call canceled,
// it died) runs on at the holder until the deadline it was sent with.
//
// A holder that is gone fails the call at once: no process serves its
// subject (NATS answers "no responders" as soon as its connection is
// gone), or a probe with a short deadline (ProbeTimeout) goes unanswered
// (a host lost without closing its connection), or the node answers with
// another incarnation (it restarted, and a start removes every sandbox
// left behind). The error is unavailable, naming the node and saying to
// create a new sandbox; sandbox.create then takes the record over, and
// sandbox.destroy removes it.
package sandbox
