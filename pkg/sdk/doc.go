// Package sdk holds no code but one constant: it is the map of utpmesh's
// software development kit and the home of the tests of its promises — the
// packages a program outside this module imports to take part in a mesh
// (this comment), the promise they keep ([MaxDeps] and the rules below) and
// the tests that hold it.
//
// # The SDK packages
//
//   - [github.com/utpmesh/utpmesh/pkg/agent]: an agent runtime's client —
//     call a tool, dispatch and wait, consume wakeups, resume a turn, ack,
//     list what is pending.
//   - [github.com/utpmesh/utpmesh/pkg/worker]: serve tools to a mesh —
//     worker.Serve wires its own CardStore and registry clients on one NATS
//     connection; reports go to the inbox as svc requests (svc.inbox.report)
//     or through the command stream, with no inbox client.
//   - [github.com/utpmesh/utpmesh/pkg/creds]: the credentials helper — a
//     mesh identity's nkey seed file as a nats.Option.
//   - [github.com/utpmesh/utpmesh/pkg/card], [github.com/utpmesh/utpmesh/pkg/utp]
//     and [github.com/utpmesh/utpmesh/subjects]: the cards, payloads and
//     subjects of the protocol (docs/protocol.md), which the three above use
//     in their signatures.
//
// # The dependency budget
//
// Each SDK package pulls in at most [MaxDeps] packages outside the standard
// library (this module's own packages count), and none of the server's:
// bbolt, cedar-go, nats-server, the OpenTelemetry SDK and its OTLP exporter,
// gRPC, protobuf. TestDependencyBudget asserts it with `go list -deps`; a
// change that needs more must move the weight behind an interface the
// server implements (as worker.Tracer does for OpenTelemetry).
//
// TestExternalModule builds a program in a module of its own that imports
// the SDK through a replace directive, as a user's project would.
//
// # The core knows no catalogue
//
// TestCoreKnowsNoCatalogue holds the other wall of the house: nothing under
// pkg/, cardstore/ or subjects/ depends on a package under services/.
// Catalogues plug in through interfaces the core defines, and cmd/utpmesh
// registers them.
package sdk

// MaxDeps is the most non-standard-library packages (this module's
// included) one SDK package may depend on.
const MaxDeps = 40
