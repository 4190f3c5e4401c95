package main

import (
	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/atpauthz"
	"github.com/utpmesh/utpmesh/services/atp/atpcli"
	"github.com/utpmesh/utpmesh/services/atp/atpmcp"
)

// The catalogues' contributions to the core, registered where the CLI
// selects its catalogues (services/catalog lists their tool services):
// ATP's Cedar schema fragment and rules on mandates (so `utpmesh
// policy`/`mandate` validate ATP's names, as every mesh process does),
// ATP's verbs (`utpmesh atp`, `utpmesh hem`), and its renderer of HEM
// tasks in the MCP bridge.
func init() {
	atpauthz.Register()
	mcpbridge.RegisterHandoff(atpmcp.HEM{})
	for _, v := range atpcli.Verbs() {
		registerVerb(v)
	}
}

// authCatalogues are the catalogues whose entity loaders the gate of a
// mesh with data directory dir uses: ATP's, reading the booking states of
// the atp service of dir.
func authCatalogues(dir string) []authz.Catalogue {
	return []authz.Catalogue{atpauthz.New(atp.StatesFor(dir))}
}
