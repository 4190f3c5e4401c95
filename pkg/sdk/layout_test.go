package sdk_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/internal/gomodtest"
)

// corePatterns are the packages of the core: everything under pkg/ (the
// SDK, the mesh assembly, the MCP bridge and the web UI among them),
// cardstore/ and subjects/.
var corePatterns = []string{module + "/pkg/...", module + "/cardstore/...", module + "/subjects/..."}

// testFixtures are the only catalogue packages a core package's tests may
// use: the demo tool echo, a fixture with no catalogue behaviour.
var testFixtures = []string{module + "/services/echo"}

// TestCoreKnowsNoCatalogue holds the house's wall between the core and the
// catalogues: no core package imports a package under services/, directly
// or through another, and their tests use none but the fixtures
// (testFixtures). A catalogue plugs in through the core's interfaces
// (authz.Catalogue, the confirmation convention of pkg/confirm, the MCP
// bridge's Handoff, the CLI's verbs), registered by cmd/utpmesh; a core
// package's tests prove it works with any catalogue through test-only
// fixtures of those interfaces, and each catalogue tests its own
// contribution (e.g. services/atp/atpmcp through the MCP bridge).
func TestCoreKnowsNoCatalogue(t *testing.T) {
	t.Run("imports", func(t *testing.T) {
		out := gomodtest.Go(t, ".", nil, append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, corePatterns...)...)
		// -deps lists every package the core builds with; a services/
		// package among them is imported by a core package, directly or not.
		for _, p := range strings.Fields(out) {
			if catalogue(p) {
				t.Errorf("the core depends on %s: a core package must not import a catalogue "+
					"(find the importer with: go list -f '{{.ImportPath}}: {{.Imports}}' ./pkg/... ./cardstore/... | grep %s)", p, p)
			}
		}
	})
	t.Run("test imports", func(t *testing.T) {
		// Directly: each core package's test files (TestImports,
		// XTestImports), named with their package.
		out := gomodtest.Go(t, ".", nil, append([]string{"list", "-f",
			"{{.ImportPath}}{{range .TestImports}} {{.}}{{end}}{{range .XTestImports}} {{.}}{{end}}"}, corePatterns...)...)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			for _, p := range f[1:] {
				if catalogue(p) && !slices.Contains(testFixtures, p) {
					t.Errorf("the tests of %s import %s: a core package's tests use test-only fixtures of the core's interfaces "+
						"(plain worker.Tool values, a confirm.Pending result, an mcpbridge.Handoff) and only %v of services/; "+
						"what they prove about a catalogue is tested in the catalogue", f[0], p, testFixtures)
				}
			}
		}
		if t.Failed() {
			return // what follows would list their imports again
		}
		// Through another package (a test helper that imports a
		// catalogue): every package the core's tests build with.
		out = gomodtest.Go(t, ".", nil, append([]string{"list", "-deps", "-test", "-f", "{{.ImportPath}}"}, corePatterns...)...)
		var indirect []string
		for _, p := range strings.Fields(out) {
			// A package recompiled for a test is listed "p [q.test]":
			// "[q.test]" is a field of its own.
			if catalogue(p) && !slices.Contains(testFixtures, p) && !slices.Contains(indirect, p) {
				indirect = append(indirect, p)
			}
		}
		if len(indirect) > 0 {
			t.Errorf("the core's tests depend on catalogue packages through another package (a test helper): %s "+
				"(find the importer with: go list -test -deps -f '{{.ImportPath}}: {{.Imports}}' ./pkg/... ./cardstore/... ./subjects/... | grep services/)",
				strings.Join(indirect, ", "))
		}
	})
}

// catalogue reports whether p is a package under services/.
func catalogue(p string) bool { return strings.HasPrefix(p, module+"/services/") }
