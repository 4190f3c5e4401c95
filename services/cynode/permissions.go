package cynode

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/cynode/sandbox"
)

// PublishSubjects are the subjects beyond the protocol's that a worker of
// CyNodeAI publishes to, for its NATS identity (services/catalog): its
// audit records (cg.<ver>.*.*.evt.sys.cynode.audit, stored by the event
// stream), the node tools' discovery of the mesh's workers ($SRV.INFO
// and $SRV.STATS of the worker service, svc.worker.<refresh op>), and
// sandbox locality (sandbox.PublishSubjects: the sandbox records bucket,
// the sandbox nodes' subjects and discovery).
func PublishSubjects(ver string) []string {
	return append([]string{
		"cg." + ver + ".*.*.evt.sys.cynode.audit",
		"$SRV.INFO." + worker.ServiceName, "$SRV.STATS." + worker.ServiceName,
		"cg." + ver + ".*.*.svc." + worker.DescribeService + ".*",
	}, sandbox.PublishSubjects(ver)...)
}

// SubscribeSubjects are the subjects a worker of CyNodeAI serves beyond
// the protocol's: the sandbox nodes' subjects,
// cg.<ver>.*.*.svc.cynode.node.* (sandbox.SubscribeSubjects).
func SubscribeSubjects(ver string) []string { return sandbox.SubscribeSubjects(ver) }

// Provision creates the buckets of CyNodeAI with the mesh core's
// connection and the mesh's replica count: the state's bucket StateBucket
// and object store BlobBucket, and the sandbox records
// (sandbox.Provision). Worker identities create none.
func Provision(ctx context.Context, nc *nats.Conn, replicas int) error {
	if err := provisionState(ctx, nc, replicas); err != nil {
		return err
	}
	return sandbox.Provision(ctx, nc, replicas)
}
