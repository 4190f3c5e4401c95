package toolkit

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// Spec is one tool of a catalogue, before it becomes a worker.Tool.
type Spec struct {
	// Name is the registry tool_name. Required.
	Name string
	// Description is shown to LLMs by list_tools.
	Description string
	// Params is the JSON Schema of the arguments; "" means
	// {"type":"object"}.
	Params string
	// Target is the part of the command subject after "cmd.tool."
	// ("atp.atp_get_context_package"). Required.
	Target string
	// CedarAction is the Cedar action the mesh's gate checks
	// (Namespace::"name"). Required.
	CedarAction string
	// Scopes are the authorization scopes a caller needs.
	Scopes []string
	// Risk is the registered risk level.
	Risk registry.RiskLevel
	// Confirmation is the registered confirmation rule; "" registers
	// never when Confirm is set, nothing otherwise.
	Confirmation registry.Confirmation
	// Operator makes the tool operator-only: registry options.principal
	// operator, so the mesh's admission refuses it to every agent.
	Operator bool
	// Timeout is the handler timeout; 0 is the mesh's default.
	Timeout time.Duration
	// AfterExecution is the registered default; "" is suspend.
	AfterExecution card.AfterExecution
}

// Validate checks that a spec names what every tool needs.
func (s *Spec) Validate() error {
	switch {
	case s.Name == "":
		return fmt.Errorf("%w: a tool has no Name", ErrSpec)
	case s.Target == "":
		return fmt.Errorf("%w: tool %s has no Target (the subject part after cmd.tool., e.g. %q)", ErrSpec, s.Name, "atp."+s.Name)
	case s.CedarAction == "":
		return fmt.Errorf("%w: tool %s has no CedarAction (Namespace::\"name\")", ErrSpec, s.Name)
	case s.Timeout < 0:
		return fmt.Errorf("%w: tool %s has a negative Timeout", ErrSpec, s.Name)
	case s.Params != "" && !json.Valid([]byte(s.Params)):
		return fmt.Errorf("%w: tool %s: Params is not JSON", ErrSpec, s.Name)
	}
	return nil
}

// Options are the registry options the spec registers.
func (s *Spec) Options() registry.Options {
	o := registry.Options{CedarAction: s.CedarAction, RiskLevel: s.Risk, Confirmation: s.Confirmation,
		TimeoutSeconds: s.Timeout.Seconds()}
	if len(s.Scopes) > 0 {
		o.Scopes = append([]string(nil), s.Scopes...)
	}
	if s.Operator {
		o.Principal = registry.PrincipalOperator
	}
	return o
}

// Tool makes the spec a worker.Tool whose handler is run behind hooks
// (Hooks.Wrap). It fails with ErrSpec when the spec is incomplete.
func (s *Spec) Tool(run Handler, hooks Hooks) (worker.Tool, error) {
	if err := s.Validate(); err != nil {
		return worker.Tool{}, err
	}
	if run == nil {
		return worker.Tool{}, fmt.Errorf("%w: tool %s has no handler", ErrSpec, s.Name)
	}
	var params json.RawMessage
	if s.Params != "" {
		params = json.RawMessage(s.Params)
	}
	return worker.Tool{
		Name: s.Name, Description: s.Description, Parameters: params, Target: s.Target,
		AfterExecution: s.AfterExecution, Options: s.Options(),
		Handler: hooks.Wrap(s, run),
	}, nil
}

// Handler runs one admitted call of a tool (a worker.HandlerFunc).
type Handler = worker.HandlerFunc

// Tools makes every (spec, handler) pair a worker.Tool behind the same
// hooks; the first bad spec fails them all.
func Tools(hooks Hooks, tools ...Def) ([]worker.Tool, error) {
	out := make([]worker.Tool, 0, len(tools))
	seen := map[string]bool{}
	for i := range tools {
		d := &tools[i]
		if seen[d.Spec.Name] {
			return nil, fmt.Errorf("%w: tool %s is defined twice", ErrSpec, d.Spec.Name)
		}
		seen[d.Spec.Name] = true
		t, err := d.Spec.Tool(d.Run, hooks)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Def is a spec with its handler.
type Def struct {
	Spec Spec
	Run  Handler
}
