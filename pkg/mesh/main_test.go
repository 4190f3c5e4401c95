package mesh_test

import (
	"os"
	"testing"
)

// TestMain lets the test binary run a cluster node of
// BenchmarkClusterFailover as a child process (runFailoverNode), so that
// the benchmark's node kills are real SIGKILLs.
func TestMain(m *testing.M) {
	runFailoverNode()
	os.Exit(m.Run())
}
