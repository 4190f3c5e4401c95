package jsstore_test

import (
	"sync/atomic"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore/jsstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
)

// The replicated store serves the tool-scoped writes itself: natsstore
// uses these methods, not its generic checks on top of cardstore.Store.
// (Asserted here: jsstore does not import natsstore.)
var (
	_ natsstore.ToolStore = (*jsstore.Store)(nil)
	_ storetest.ToolStore = (*jsstore.Store)(nil)
)

// TestToolsConformance runs the tool-scoped conformance suite (the one
// boltstore runs) on one server, with direct reads and with the read
// paths of a replicated stream forced on.
func TestToolsConformance(t *testing.T) {
	ns := startServer(t, "")
	nc := connect(t, ns)
	for _, mode := range []struct {
		name        string
		leaderReads bool
	}{
		{"direct-reads", false},
		{"leader-reads", true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			storetest.RunTools(t, func(t *testing.T) storetest.ToolStore {
				s := open(t, nc, jsstore.Config{})
				jsstore.SetLeaderReads(s, mode.leaderReads)
				return s
			})
		})
	}
}

// TestToolsConformanceR3 runs it on a 3-node cluster with three replicas,
// each store's connection on another node.
func TestToolsConformanceR3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	servers := startCluster(t, 3)
	var next atomic.Int64
	storetest.RunTools(t, func(t *testing.T) storetest.ToolStore {
		return openR3(t, servers, int(next.Add(1)%3), newStream())
	})
}
