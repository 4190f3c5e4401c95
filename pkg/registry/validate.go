package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/utpmesh/utpmesh/subjects"
)

// Limits enforced by Validate.
const (
	// MaxNameLen is the maximum length in bytes of project_id and tool_name.
	MaxNameLen = 128
	// MaxDescriptionLen is the maximum length in bytes of description.
	MaxDescriptionLen = 64 << 10
	// MaxParametersLen is the maximum size in bytes of the parameters schema.
	MaxParametersLen = 256 << 10
	// MaxScopeLen is the maximum length in bytes of one scope.
	MaxScopeLen = 256
)

var (
	envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// cedarRE: Namespace(::Namespace)*::"id", the id without quotes,
	// backslashes or control characters.
	cedarRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*::"[^"\\\x00-\x1f]+"$`)
)

// Validate checks a definition submitted by a user or a tool service. It
// returns nil or a *FieldError matching ErrInvalid (and ErrReserved for a
// built-in name). The rules, checked in this order:
//
//   - project_id: 1..128 bytes of [A-Za-z0-9_-] (a subject token);
//   - tool_name: 1..128 bytes of [A-Za-z0-9_.-], not a reserved name;
//   - description: valid UTF-8, at most MaxDescriptionLen bytes;
//   - after_execution: suspend or terminate;
//   - target_subject: a subjects template of kind tool command
//     (cg.<ver>.<project>.<channel>.cmd.tool.<target>[.…]); a
//     cmd.sys.pmo.internal subject is refused; a concrete project in the
//     template must equal project_id;
//   - parameters: a JSON object with "type":"object" that compiles as a
//     JSON Schema (draft 2020-12, or draft-07 when $schema names it);
//   - options: the rules listed in the package documentation.
//
// UpdatedAt is ignored.
func Validate(e *Entry) error { return validate(e, false) }

// ValidateBuiltin checks the definition of a built-in PMO tool: the same
// rules as Validate except that a reserved tool_name is allowed and the
// target_subject must be cg.<ver>.<project>.<channel>.cmd.sys.pmo.internal.<tool_name>.
// The mesh uses it for the definitions it serves itself.
func ValidateBuiltin(e *Entry) error { return validate(e, true) }

func validate(e *Entry, builtin bool) error {
	if e == nil {
		return invalid("entry", "is nil")
	}
	if err := checkProjectID(e.ProjectID); err != nil {
		return err
	}
	if err := checkToolName(e.ToolName); err != nil {
		return err
	}
	if !builtin && IsReserved(e.ToolName) {
		return &FieldError{Field: "tool_name", Reserved: true,
			Msg: fmt.Sprintf("%q is reserved for the built-in PMO tool", e.ToolName)}
	}
	if !utf8.ValidString(e.Description) {
		return invalid("description", "is not valid UTF-8")
	}
	if len(e.Description) > MaxDescriptionLen {
		return invalid("description", fmt.Sprintf("is %d bytes, max %d", len(e.Description), MaxDescriptionLen))
	}
	if !e.AfterExecution.Valid() {
		return invalid("after_execution", fmt.Sprintf("%q is not suspend|terminate", e.AfterExecution))
	}
	if err := checkTarget(e, builtin); err != nil {
		return err
	}
	sch, err := compileParameters(e.Parameters)
	if err != nil {
		return err
	}
	return validateOptions(&e.Options, sch)
}

// checkProjectID applies the subject token rules to a project_id.
func checkProjectID(p string) error {
	if err := subjects.ValidateToken("project_id", p); err != nil {
		var te *subjects.TokenError
		if errors.As(err, &te) {
			return invalid("project_id", fmt.Sprintf("%s: %s (want 1..%d of [A-Za-z0-9_-])", quote(p), te.Reason, MaxNameLen))
		}
		return invalid("project_id", err.Error())
	}
	return nil
}

// checkToolName applies the tool_name rules.
func checkToolName(n string) error {
	if n == "" {
		return invalid("tool_name", "is required")
	}
	if len(n) > MaxNameLen {
		return invalid("tool_name", fmt.Sprintf("is %d bytes, max %d", len(n), MaxNameLen))
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' {
			continue
		}
		return invalid("tool_name", fmt.Sprintf("%s: invalid character %q at byte %d (want [A-Za-z0-9_.-])", quote(n), rune(c), i))
	}
	return nil
}

// CheckProjectID validates a project_id given to List (the project_id rule
// of Validate); errors are *FieldError matching ErrInvalid.
func CheckProjectID(projectID string) error { return checkProjectID(projectID) }

// CheckKey validates the (project_id, tool_name) key given to Get and
// Delete: project_id and tool_name rules of Validate. Registry
// implementations use it; errors are *FieldError matching ErrInvalid.
func CheckKey(projectID, toolName string) error {
	if err := checkProjectID(projectID); err != nil {
		return err
	}
	return checkToolName(toolName)
}

// checkTarget validates target_subject.
func checkTarget(e *Entry, builtin bool) error {
	const f = "target_subject"
	if e.TargetSubject == "" {
		return invalid(f, "is required (e.g. cg.{ver}.{project_id}.{channel_id}.cmd.tool.<target>)")
	}
	t, err := subjects.ParseTemplate(e.TargetSubject)
	if err != nil {
		return invalid(f, err.Error())
	}
	kind := t.Kind()
	switch {
	case builtin && kind != subjects.KindPMOInternal:
		return invalid(f, fmt.Sprintf("%s: built-in tools must use cg.{ver}.{project_id}.{channel_id}.cmd.sys.pmo.internal.%s", quote(e.TargetSubject), e.ToolName))
	case !builtin && kind == subjects.KindPMOInternal:
		return invalid(f, fmt.Sprintf("%s: only built-in tools may use cmd.sys.pmo.internal", quote(e.TargetSubject)))
	case !builtin && kind != subjects.KindToolCommand:
		return invalid(f, fmt.Sprintf("%s is not a tool command subject (kind %s); want cg.{ver}.{project_id}.{channel_id}.cmd.tool.<target>…", quote(e.TargetSubject), kind))
	}
	sub, ok := renderFor(t, e.ProjectID)
	if !ok {
		return invalid(f, fmt.Sprintf("%s names another project than project_id %q", quote(e.TargetSubject), e.ProjectID))
	}
	if builtin {
		if tool, _ := sub.PMOTool(); tool != e.ToolName {
			return invalid(f, fmt.Sprintf("%s: built-in tool %q must use cmd.sys.pmo.internal.%s", quote(e.TargetSubject), e.ToolName, e.ToolName))
		}
	}
	return nil
}

// renderFor renders t for project with stand-in ver and channel values,
// reporting false when the template fixes another project. Each of ver and
// channel is either a placeholder (needs a value) or concrete (takes ""),
// so one of the four combinations renders when the project matches.
func renderFor(t subjects.Template, project string) (subjects.Subject, bool) {
	for _, ver := range [2]string{"", subjects.DefaultVersion} {
		for _, ch := range [2]string{"", "probe"} {
			if s, err := t.Render(ver, project, ch); err == nil {
				return s, s.Project == project
			}
		}
	}
	return subjects.Subject{}, false
}

// compileParameters checks the parameters field and compiles it.
func compileParameters(raw json.RawMessage) (*Schema, error) {
	const f = "parameters"
	p := bytes.TrimSpace(raw)
	if len(p) == 0 || bytes.Equal(p, []byte("null")) {
		return nil, invalid(f, `is required (a JSON Schema object such as {"type":"object","properties":{}})`)
	}
	if len(p) > MaxParametersLen {
		return nil, invalid(f, fmt.Sprintf("is %d bytes, max %d", len(p), MaxParametersLen))
	}
	if p[0] != '{' {
		return nil, invalid(f, "must be a JSON object (a JSON Schema)")
	}
	var probe struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(p, &probe); err != nil {
		return nil, invalid(f, "is not valid JSON: "+err.Error())
	}
	if probe.Type != "object" {
		return nil, invalid(f, fmt.Sprintf(`must have "type": "object" (arguments are a JSON object), got %s`, jsonString(probe.Type)))
	}
	sch, err := CompileSchema(p)
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			return nil, err
		}
		return nil, invalid(f, err.Error())
	}
	return sch, nil
}

// validateOptions checks o; sch (may be nil) is the compiled parameters.
func validateOptions(o *Options, sch *Schema) error {
	t := o.TimeoutSeconds
	if math.IsNaN(t) || t < 0 || t > MaxTimeoutSeconds {
		return invalid("options.timeout_seconds", fmt.Sprintf("%v is out of range (0 = default %s, max %d)", t, DefaultTimeout, MaxTimeoutSeconds))
	}
	if err := checkArgMap("options.args.defaults", o.Args.Defaults, sch); err != nil {
		return err
	}
	if err := checkArgMap("options.args.fixed", o.Args.Fixed, sch); err != nil {
		return err
	}
	for _, k := range sortedKeys(o.Args.Fixed) {
		if _, ok := o.Args.Defaults[k]; ok {
			return invalid("options.args", fmt.Sprintf("key %q is in both defaults and fixed", k))
		}
	}
	for _, k := range sortedKeys(o.Envs) {
		if !envKeyRE.MatchString(k) {
			return invalid("options.envs", fmt.Sprintf("key %q is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", k))
		}
		if strings.IndexByte(o.Envs[k], 0) >= 0 {
			return invalid("options.envs."+k, "contains a NUL byte")
		}
	}
	if !o.RiskLevel.Valid() {
		return invalid("options.risk_level", fmt.Sprintf("%q is not LOW|MEDIUM|HIGH", o.RiskLevel))
	}
	if !o.Confirmation.Valid() {
		return invalid("options.confirmation", fmt.Sprintf("%q is not never|always|when_multiple", o.Confirmation))
	}
	if o.CedarAction != "" && !cedarRE.MatchString(o.CedarAction) {
		return invalid("options.cedar_action", fmt.Sprintf(`%s is not shaped Namespace::"name" (e.g. ATPAction::"get_context_package")`, quote(o.CedarAction)))
	}
	for i, s := range o.Scopes {
		f := fmt.Sprintf("options.scopes[%d]", i)
		switch {
		case s == "":
			return invalid(f, "is empty")
		case len(s) > MaxScopeLen:
			return invalid(f, fmt.Sprintf("is %d bytes, max %d", len(s), MaxScopeLen))
		case !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
			return invalid(f, fmt.Sprintf("%s contains white space or control characters", quote(s)))
		case slices.Index(o.Scopes, s) < i:
			return invalid(f, fmt.Sprintf("%s is a duplicate", quote(s)))
		}
	}
	if o.MaxDeliveries < 0 || o.MaxDeliveries > MaxDeliveriesLimit {
		return invalid("options.max_deliveries", fmt.Sprintf("%d is out of range (0 = default, else 1..%d)", o.MaxDeliveries, MaxDeliveriesLimit))
	}
	if o.Principal != "" && o.Principal != PrincipalOperator {
		return invalid("options.principal", fmt.Sprintf("%s is not a principal kind (empty for agents, or %q)", quote(o.Principal), PrincipalOperator))
	}
	for _, k := range sortedKeys(o.Extra) {
		if slices.Contains(knownOptions, k) {
			return invalid("options."+k, "is set in Extra but is a typed option")
		}
		if !json.Valid(o.Extra[k]) {
			return invalid("options."+k, "is not valid JSON")
		}
	}
	return nil
}

// checkArgMap checks defaults or fixed: valid JSON values, allowed by the
// parameters schema (validated against the property's schema when there
// is one, refused when the schema forbids additional properties).
func checkArgMap(field string, m map[string]json.RawMessage, sch *Schema) error {
	for _, k := range sortedKeys(m) {
		v := m[k]
		if k == "" {
			return invalid(field, "has an empty key")
		}
		if !json.Valid(v) {
			return invalid(field+"."+k, "is not valid JSON")
		}
		if sch == nil {
			continue
		}
		if err := sch.validateProperty(k, v); err != nil {
			return invalid(field+"."+k, strings.TrimPrefix(err.Error(), ErrArgs.Error()+": "))
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// quote quotes s for a message, truncating long values.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		return fmt.Sprintf("%q…", s[:max])
	}
	return fmt.Sprintf("%q", s)
}

func jsonString(v any) string {
	if v == nil {
		return "nothing"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
