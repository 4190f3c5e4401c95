package catalog_test

import (
	"context"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/builtins"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/services/catalog"
)

// TestEveryEntryCompiles: every registry entry every catalogue ships (and
// the PMO built-ins) passes registry validation, so its parameters schema
// compiles under the registry's JSON Schema library and its args defaults
// and fixed values satisfy it.
func TestEveryEntryCompiles(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, name := range catalog.Names() {
		t.Run(name, func(t *testing.T) {
			tools, err := catalog.Build([]string{name}, catalog.Deps{DataDir: t.TempDir(), Context: ctx, Late: catalog.NewLate()})
			if err != nil {
				t.Fatal(err)
			}
			if len(tools) == 0 {
				t.Fatal("no tools")
			}
			for _, tool := range tools {
				if err := registry.Validate(tool.Entry("p")); err != nil {
					t.Errorf("%s: %v", tool.Name, err)
				}
			}
		})
	}
	t.Run("builtins", func(t *testing.T) {
		for _, tool := range builtins.Tools(builtins.Deps{}) {
			if err := registry.ValidateBuiltin(tool.Entry("p")); err != nil {
				t.Errorf("%s: %v", tool.Name, err)
			}
		}
	})
}
