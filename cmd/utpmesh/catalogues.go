package main

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
	"github.com/utpmesh/utpmesh/pkg/apps/webui"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/config"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/atpauthz"
	"github.com/utpmesh/utpmesh/services/atp/atpcli"
	"github.com/utpmesh/utpmesh/services/atp/atpconfig"
	"github.com/utpmesh/utpmesh/services/atp/atpmcp"
	"github.com/utpmesh/utpmesh/services/atp/atpui"
	"github.com/utpmesh/utpmesh/services/cynode/cynodeconfig"
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

// operatorHandoffs are the catalogues' MCP handoffs that decide as an
// operator, each call made by call (utpmesh mcp --operator-creds): ATP's
// HEM escalations.
func operatorHandoffs(call mcpbridge.CallFunc) []mcpbridge.Handoff {
	return []mcpbridge.Handoff{atpmcp.HEM{Operator: call}}
}

// uiEscalations are the catalogues' queues of items waiting for an
// operator in the web UI (/escalations): ATP's HEM tasks, whose mandate
// expansions are narrowed from parent (the UI's mandate).
func uiEscalations(parent string) []webui.Escalations {
	return []webui.Escalations{atpui.HEM{ParentMandate: parent}}
}

// authCatalogues are the catalogues whose entity loaders the gate of a
// mesh with data directory dir uses: ATP's, reading the booking states of
// the atp service of dir.
func authCatalogues(dir string) []authz.Catalogue {
	return []authz.Catalogue{atpauthz.New(atp.StatesFor(dir))}
}

// configSections are the sections of the configuration file (--config)
// this build reads, one per catalogue that has an outside world to set;
// each is named like the tool service that uses it. A file with any
// other top-level key is refused.
func configSections() []config.Section {
	return []config.Section{atpconfig.Section(), cynodeconfig.Section()}
}

// loadConfig reads and validates the --config file (nil for ""), and
// logs the sections that none of services uses (another process's part
// of a shared file).
func loadConfig(path string, services []string, log *slog.Logger) (*config.File, error) {
	if path == "" {
		return nil, nil
	}
	f, err := config.Load(path, configSections()...)
	if err != nil {
		msg := err.Error()
		if n := strings.Count(msg, "\n") + 1; n > 1 {
			msg = fmt.Sprintf("%d problems:\n  %s", n, strings.ReplaceAll(msg, "\n", "\n  "))
		}
		return nil, usagef("--config: %s", msg)
	}
	for _, name := range f.Names() {
		if !slices.Contains(services, name) {
			log.Info(fmt.Sprintf("config: section %s of %s is not used: this process does not serve %s", name, path, name), "services", strings.Join(services, ","))
		}
	}
	return f, nil
}
