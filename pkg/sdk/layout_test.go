package sdk_test

import (
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/internal/gomodtest"
)

// TestCoreKnowsNoCatalogue holds the house's wall between the core and the
// catalogues: no package under pkg/ (the SDK, the mesh assembly, the MCP
// bridge and the web UI among them), cardstore/ or subjects/ imports a
// package under services/, directly or through another. A catalogue plugs
// in through the core's interfaces (authz.Catalogue, the confirmation
// convention of pkg/confirm, the CLI's verbs), registered by cmd/utpmesh.
// Tests may still use a catalogue's tool as a fixture (services/echo).
func TestCoreKnowsNoCatalogue(t *testing.T) {
	out := gomodtest.Go(t, ".", nil, "list", "-deps", "-f", "{{.ImportPath}}",
		module+"/pkg/...", module+"/cardstore/...", module+"/subjects/...")
	// -deps lists every package the core builds with; a services/ package
	// among them is imported by a core package, directly or not.
	for _, p := range strings.Fields(out) {
		if strings.HasPrefix(p, module+"/services/") {
			t.Errorf("the core depends on %s: a core package must not import a catalogue "+
				"(find the importer with: go list -f '{{.ImportPath}}: {{.Imports}}' ./pkg/... ./cardstore/... | grep %s)", p, p)
		}
	}
}
