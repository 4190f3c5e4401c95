// Package cynodeconfig is the "cynode" section of the configuration file
// (utpmesh up/worker --config FILE): CyNodeAI's way out to the network.
// web holds the per-project egress allowlists of web.fetch (schemes,
// domains, ports), its limits and the web.search provider; api the
// providers api.call may reach. A part the section sets replaces the same
// part of the data directory's cynode.json (which keeps agents, policies,
// models, seed, git and sandbox); the rest of cynode.json stays.
package cynodeconfig

import (
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strings"

	"github.com/utpmesh/utpmesh/pkg/config"
	"github.com/utpmesh/utpmesh/services/cynode"
)

// Name is the section's top-level key.
const Name = "cynode"

// Config is the cynode section, in cynode.json's field names.
type Config struct {
	// Web replaces cynode.json's "web": egress allowlists per project,
	// fetch limits, the search provider.
	Web *cynode.WebConfig `json:"web,omitempty"`
	// API replaces cynode.json's "api": api.call's providers and limits.
	API *cynode.APIConfig `json:"api,omitempty"`
}

// Section is the cynode section's parser, for config.Load.
func Section() config.Section {
	return config.Section{Name: Name, Parse: func(n *config.Node) (any, error) {
		var c Config
		if err := n.Decode(&c); err != nil {
			return nil, err
		}
		return c, nil
	}}
}

// From returns the cynode section of f, and whether f has one.
func From(f *config.File) (Config, bool) {
	v, ok := f.Section(Name)
	if !ok {
		return Config{}, false
	}
	c, ok := v.(Config)
	return c, ok
}

// Overlay returns a copy of base with the parts c sets replaced.
func (c Config) Overlay(base *cynode.Config) *cynode.Config {
	out := *base
	if c.Web != nil {
		out.Web = *c.Web
	}
	if c.API != nil {
		out.API = *c.API
	}
	return &out
}

// Apply gives d the configuration of its data directory (d.Config, or
// cynode.json, written with the demo configuration when missing) with the
// parts the cynode section of f sets replaced, and logs which; nothing
// when f has no cynode section.
func Apply(f *config.File, d *cynode.Deps, log *slog.Logger) error {
	c, ok := From(f)
	if !ok {
		return nil
	}
	if log == nil {
		log = slog.Default()
	}
	base := d.Config
	if base == nil {
		if d.DataDir == "" {
			return fmt.Errorf("cynode: no data directory: pass --data DIR (the service keeps %s and %s there)", cynode.DBFile, cynode.ConfigFile)
		}
		var err error
		if base, err = cynode.LoadOrInitConfig(d.DataDir); err != nil {
			return err
		}
	}
	d.Config = c.Overlay(base)
	if err := d.Config.Validate(); err != nil {
		return fmt.Errorf("%s with the cynode section of %s: %w", cynode.ConfigFile, f.Path, err)
	}
	var parts []string
	if c.Web != nil {
		projects := make([]string, 0, len(c.Web.Projects))
		for p, pol := range c.Web.Projects {
			projects = append(projects, p+"="+strings.Join(pol.Domains, "|"))
		}
		sort.Strings(projects)
		search := "off"
		if c.Web.Search != nil {
			search = redact(c.Web.Search.URL)
		}
		parts = append(parts, fmt.Sprintf("web (egress allowlists %s; search %s)", strings.Join(projects, ", "), search))
	}
	if c.API != nil {
		names := make([]string, 0, len(c.API.Providers))
		for n := range c.API.Providers {
			names = append(names, n)
		}
		sort.Strings(names)
		parts = append(parts, "api (providers "+strings.Join(names, ", ")+")")
	}
	if len(parts) > 0 {
		log.Info("cynode: configured from "+f.Path+", replacing the same parts of "+cynode.ConfigFile, "parts", strings.Join(parts, "; "))
	}
	return nil
}

// redact is u without its query, user info and fragment, for the log.
func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(an unparsable URL)"
	}
	p.User, p.RawQuery, p.Fragment, p.ForceQuery = nil, "", "", false
	return p.String()
}
