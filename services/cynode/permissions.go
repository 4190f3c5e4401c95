package cynode

import "github.com/utpmesh/utpmesh/pkg/worker"

// PublishSubjects are the subjects beyond the protocol's that a worker of
// CyNodeAI publishes to, for its NATS identity (services/catalog): its
// audit records (cg.<ver>.*.*.evt.sys.cynode.audit, stored by the event
// stream), and the node tools' discovery of the mesh's workers ($SRV.INFO
// and $SRV.STATS of the worker service, svc.worker.<refresh op>).
func PublishSubjects(ver string) []string {
	return []string{
		"cg." + ver + ".*.*.evt.sys.cynode.audit",
		"$SRV.INFO." + worker.ServiceName, "$SRV.STATS." + worker.ServiceName,
		"cg." + ver + ".*.*.svc." + worker.DescribeService + ".*",
	}
}
