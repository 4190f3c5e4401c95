package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// DefaultTimeout is the handler timeout used when Options.TimeoutSeconds
// is 0 (unset).
const DefaultTimeout = 30 * time.Second

// MaxTimeoutSeconds is the largest allowed Options.TimeoutSeconds (24h).
const MaxTimeoutSeconds = 24 * 60 * 60

// MaxDeliveriesLimit is the largest allowed Options.MaxDeliveries.
const MaxDeliveriesLimit = 100

// RiskLevel classifies how dangerous a tool is. The empty value means
// "not stated".
type RiskLevel string

// The risk levels.
const (
	RiskLow    RiskLevel = "LOW"
	RiskMedium RiskLevel = "MEDIUM"
	RiskHigh   RiskLevel = "HIGH"
)

// Valid reports whether r is "", LOW, MEDIUM or HIGH.
func (r RiskLevel) Valid() bool {
	return r == "" || r == RiskLow || r == RiskMedium || r == RiskHigh
}

// Confirmation is a tool's declared confirmation policy: when its calls
// wait for a human's confirmation instead of running (the convention of
// package confirm, docs/protocol.md §19). It is informative: the mesh
// validates the value (Valid) and list_tools shows it, and nothing in the
// mesh enforces it; a tool that implements the convention parks its own
// calls by the policy it declares here (ATLAS does). The empty value means
// "not declared".
type Confirmation string

// The confirmation policies: no call waits, every call waits, or a call
// waits when it acts on more than one object (the tool says what counts).
const (
	ConfirmNever        Confirmation = "never"
	ConfirmAlways       Confirmation = "always"
	ConfirmWhenMultiple Confirmation = "when_multiple"
)

// Valid reports whether c is "", never, always or when_multiple.
func (c Confirmation) Valid() bool {
	return c == "" || c == ConfirmNever || c == ConfirmAlways || c == ConfirmWhenMultiple
}

// Args holds argument values the registry merges into every call (see
// ApplyArgs). Both maps go from a top-level argument name to a JSON value.
type Args struct {
	// Defaults fill argument keys the caller did not send.
	Defaults map[string]json.RawMessage `json:"defaults,omitempty"`
	// Fixed override whatever the caller sent for these keys.
	Fixed map[string]json.RawMessage `json:"fixed,omitempty"`
}

// Options are the execution options of a tool. Unknown JSON keys are kept
// in Extra and written back, so newer definitions survive older code.
type Options struct {
	// TimeoutSeconds is the handler timeout; 0 means DefaultTimeout, the
	// maximum is MaxTimeoutSeconds. JSON "timeout_seconds".
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	// Args are default and fixed argument values. JSON "args".
	Args Args `json:"args,omitzero"`
	// Envs are environment values handed to the handler. Keys match
	// [A-Za-z_][A-Za-z0-9_]*. JSON "envs".
	Envs map[string]string `json:"envs,omitempty"`
	// RiskLevel is LOW, MEDIUM, HIGH or empty. JSON "risk_level".
	RiskLevel RiskLevel `json:"risk_level,omitempty"`
	// Confirmation is the declared confirmation policy: never, always,
	// when_multiple or empty; informative (see Confirmation).
	// JSON "confirmation".
	Confirmation Confirmation `json:"confirmation,omitempty"`
	// CedarAction is the Cedar action checked before a call, shaped
	// Namespace::"name" (e.g. ATPAction::"get_context_package").
	// JSON "cedar_action".
	CedarAction string `json:"cedar_action,omitempty"`
	// Scopes are the authorization scopes a caller needs. JSON "scopes".
	Scopes []string `json:"scopes,omitempty"`
	// MaxDeliveries caps command redeliveries; 0 means the mesh default,
	// else 1..MaxDeliveriesLimit. JSON "max_deliveries".
	MaxDeliveries int `json:"max_deliveries,omitempty"`
	// Principal is who may call the tool: empty (agents, with their
	// mandates) or PrincipalOperator (operators only: the mesh's admission
	// refuses the tool to agents, whatever their mandate says; HEM
	// confirmations, settings that guard an agent's own permissions).
	// JSON "principal".
	Principal string `json:"principal,omitempty"`
	// Extra holds option keys this package does not know, verbatim.
	Extra map[string]json.RawMessage `json:"-"`
}

// knownOptions are the JSON keys of the typed Options fields.
var knownOptions = []string{"timeout_seconds", "args", "envs", "risk_level",
	"confirmation", "cedar_action", "scopes", "max_deliveries", "principal"}

// PrincipalOperator is the Options.Principal of an operator-only tool.
const PrincipalOperator = "operator"

// Timeout returns the handler timeout: TimeoutSeconds, or DefaultTimeout
// when it is 0.
func (o Options) Timeout() time.Duration {
	if o.TimeoutSeconds <= 0 {
		return DefaultTimeout
	}
	return time.Duration(o.TimeoutSeconds * float64(time.Second))
}

// Clone returns a deep copy of o.
func (o Options) Clone() Options {
	c := o
	c.Args.Defaults = cloneRawMap(o.Args.Defaults)
	c.Args.Fixed = cloneRawMap(o.Args.Fixed)
	c.Envs = maps.Clone(o.Envs)
	c.Scopes = slices.Clone(o.Scopes)
	c.Extra = cloneRawMap(o.Extra)
	return c
}

func cloneRawMap(m map[string]json.RawMessage) map[string]json.RawMessage {
	if m == nil {
		return nil
	}
	c := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		c[k] = slices.Clone(v)
	}
	return c
}

// optionsJSON has the typed fields only (no custom methods).
type optionsJSON Options

// MarshalJSON writes the typed fields and the Extra keys as one object
// with sorted keys. A typed field wins over an Extra key of the same name.
func (o Options) MarshalJSON() ([]byte, error) {
	typed, err := json.Marshal(optionsJSON(o))
	if err != nil {
		return nil, err
	}
	if len(o.Extra) == 0 {
		return typed, nil
	}
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(typed, &m); err != nil {
		return nil, err
	}
	for k, v := range o.Extra {
		if _, ok := m[k]; ok || slices.Contains(knownOptions, k) {
			continue
		}
		if !json.Valid(v) {
			return nil, fmt.Errorf("registry: options.%s: extra value is not valid JSON", k)
		}
		m[k] = v
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads a JSON object (or null). Keys are matched exactly
// (case-sensitive); unknown keys go to Extra. Errors are *FieldError
// naming options.<key>.
func (o *Options) UnmarshalJSON(data []byte) error {
	*o = Options{}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return invalid("options", "must be a JSON object: "+err.Error())
	}
	for k, v := range m {
		var dst any
		switch k {
		case "timeout_seconds":
			dst = &o.TimeoutSeconds
		case "args":
			if err := o.Args.unmarshal(v); err != nil {
				return prefixed("options", err)
			}
			continue
		case "envs":
			dst = &o.Envs
		case "risk_level":
			dst = &o.RiskLevel
		case "confirmation":
			dst = &o.Confirmation
		case "cedar_action":
			dst = &o.CedarAction
		case "scopes":
			dst = &o.Scopes
		case "max_deliveries":
			dst = &o.MaxDeliveries
		case "principal":
			dst = &o.Principal
		default:
			if o.Extra == nil {
				o.Extra = map[string]json.RawMessage{}
			}
			o.Extra[k] = slices.Clone(v)
			continue
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return invalid("options."+k, jsonTypeMsg(err))
		}
	}
	return nil
}

// unmarshal decodes the args object strictly: only defaults and fixed.
func (a *Args) unmarshal(data []byte) error {
	*a = Args{}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return invalid("args", "must be an object with defaults and/or fixed")
	}
	for k, v := range m {
		var dst *map[string]json.RawMessage
		switch k {
		case "defaults":
			dst = &a.Defaults
		case "fixed":
			dst = &a.Fixed
		default:
			return invalid("args", fmt.Sprintf("unknown key %q (want defaults, fixed)", k))
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return invalid("args."+k, "must be a JSON object")
		}
	}
	return nil
}

// jsonTypeMsg shortens encoding/json type errors.
func jsonTypeMsg(err error) string {
	if te, ok := err.(*json.UnmarshalTypeError); ok {
		return fmt.Sprintf("got JSON %s, want %s", te.Value, te.Type)
	}
	return err.Error()
}
