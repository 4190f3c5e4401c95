// Package catalog maps the tool-service names that `utpmesh worker` and
// `utpmesh up` accept to the services that build them. Every tool service
// has the same shape: a factory that takes Deps and returns worker tools.
package catalog

import (
	"fmt"
	"sort"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// Deps is what a tool service may use.
type Deps struct {
	NC       *nats.Conn
	Store    cardstore.Store
	Registry registry.Registry
	// DataDir is where a service keeps its own files (one bbolt file per
	// service); services that need it fail clearly when it is empty.
	DataDir string
}

// Factory builds a service's tools.
type Factory func(Deps) ([]worker.Tool, error)

// Service is one entry of the catalogue.
type Service struct {
	// Name is what `utpmesh worker NAME` takes.
	Name string
	// Description says what the service does.
	Description string
	// Build makes its tools.
	Build Factory
	// InUp reports whether `utpmesh up` serves it by default.
	InUp bool
}

var services = map[string]Service{
	"echo": {Name: "echo", Description: "demo tool: returns its arguments (smoke tests, benchmarks)", InUp: true,
		Build: func(Deps) ([]worker.Tool, error) { return []worker.Tool{echo.Tool()}, nil }},
}

// Lookup returns the service of a name.
func Lookup(name string) (Service, error) {
	s, ok := services[name]
	if !ok {
		return Service{}, fmt.Errorf("unknown tool service %q; available: %s", name, strings.Join(Names(), ", "))
	}
	return s, nil
}

// Names lists every service name, sorted.
func Names() []string {
	out := make([]string, 0, len(services))
	for n := range services {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Default lists the services `utpmesh up` serves.
func Default() []Service {
	var out []Service
	for _, n := range Names() {
		if services[n].InUp {
			out = append(out, services[n])
		}
	}
	return out
}

// Build builds the tools of the named services.
func Build(names []string, d Deps) ([]worker.Tool, error) {
	var tools []worker.Tool
	for _, n := range names {
		s, err := Lookup(n)
		if err != nil {
			return nil, err
		}
		ts, err := s.Build(d)
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", n, err)
		}
		tools = append(tools, ts...)
	}
	return tools, nil
}
