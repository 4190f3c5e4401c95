package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"gopkg.in/yaml.v3"
)

// MaxYAMLDepth bounds the nesting depth of an imported YAML document.
const MaxYAMLDepth = 64

// yamlKeys are the keys a tool item may have.
var yamlKeys = []string{"project_id", "tool_name", "name", "description",
	"parameters", "target_subject", "after_execution", "options"}

// ParseYAML reads CommonGround-style tool definitions for project
// projectID and returns them validated (Validate), in document order. The
// input may hold several YAML documents ("---"); each document is one of
//
//   - a list of tool mappings;
//   - a mapping with the single key "tools" holding such a list;
//   - a single tool mapping (CommonGround's one-tool-per-file format).
//
// A tool mapping has tool_name (or name), description, parameters (a
// mapping, converted to a JSON Schema), target_subject, after_execution
// and options (a mapping, see Options); an optional project_id must equal
// projectID. Unknown keys are refused to catch typos; unknown keys inside
// options are kept in Options.Extra. Mapping keys must be strings.
//
// Errors are *FieldError naming the item and field, counted across
// documents: `tools[2].after_execution: "pause" is not suspend|terminate`.
// Duplicate tool names are refused. Empty input gives an empty list.
func ParseYAML(data []byte, projectID string) ([]*Entry, error) {
	if err := checkProjectID(projectID); err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	entries := []*Entry{}
	seen := map[string]int{}
	for doc := 0; ; doc++ {
		var raw any
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, invalid("yaml", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		items, err := docItems(raw, doc)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			i := len(entries)
			f := fmt.Sprintf("tools[%d]", i)
			e, err := parseItem(it, projectID)
			if err != nil {
				return nil, prefixed(f, err)
			}
			if err := Validate(e); err != nil {
				return nil, prefixed(f, err)
			}
			if j, dup := seen[e.ToolName]; dup {
				return nil, invalid(f+".tool_name", fmt.Sprintf("%q is a duplicate of tools[%d]", e.ToolName, j))
			}
			seen[e.ToolName] = i
			entries = append(entries, e)
		}
	}
	return entries, nil
}

// docItems returns the tool items of one decoded document.
func docItems(raw any, doc int) ([]any, error) {
	switch v := raw.(type) {
	case nil:
		return nil, nil
	case []any:
		return v, nil
	case map[string]any:
		if tools, ok := v["tools"]; ok {
			for k := range v {
				if k != "tools" {
					return nil, invalid(fmt.Sprintf("document[%d]", doc), fmt.Sprintf("unknown top-level key %q next to tools", k))
				}
			}
			list, ok := tools.([]any)
			if !ok && tools != nil {
				return nil, invalid(fmt.Sprintf("document[%d].tools", doc), "must be a list of tool definitions")
			}
			return list, nil
		}
		return []any{v}, nil
	case map[any]any:
		return []any{v}, nil
	}
	return nil, invalid(fmt.Sprintf("document[%d]", doc), "must be a list of tools, a mapping with tools:, or one tool mapping")
}

// parseItem converts one tool mapping into an Entry (not yet validated).
func parseItem(it any, projectID string) (*Entry, error) {
	m, ok := it.(map[string]any)
	if !ok {
		if _, isMap := it.(map[any]any); isMap {
			if _, err := toJSONValue(it, 0); err != nil {
				return nil, err
			}
		}
		return nil, invalid("", "must be a mapping with tool_name, description, parameters, target_subject, after_execution, options")
	}
	for _, k := range sortedKeys(m) {
		if !slices.Contains(yamlKeys, k) {
			return nil, invalid(k, "unknown key (want "+fmt.Sprint(yamlKeys)+")")
		}
	}
	e := &Entry{ProjectID: projectID}
	str := func(key string) (string, error) {
		v, ok := m[key]
		if !ok || v == nil {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", invalid(key, fmt.Sprintf("must be a string, got %s", yamlType(v)))
		}
		return s, nil
	}
	var err error
	if p, err := str("project_id"); err != nil {
		return nil, err
	} else if p != "" && p != projectID {
		return nil, invalid("project_id", fmt.Sprintf("%q differs from the import project %q", p, projectID))
	}
	if e.ToolName, err = str("tool_name"); err != nil {
		return nil, err
	}
	name, err := str("name")
	if err != nil {
		return nil, err
	}
	switch {
	case e.ToolName == "":
		e.ToolName = name
	case name != "" && name != e.ToolName:
		return nil, invalid("name", fmt.Sprintf("%q differs from tool_name %q (give one of them)", name, e.ToolName))
	}
	if e.Description, err = str("description"); err != nil {
		return nil, err
	}
	if e.TargetSubject, err = str("target_subject"); err != nil {
		return nil, err
	}
	ae, err := str("after_execution")
	if err != nil {
		return nil, err
	}
	e.AfterExecution = card.AfterExecution(ae)
	if p, ok := m["parameters"]; ok && p != nil {
		if _, isMap := p.(map[string]any); !isMap {
			if _, isAnyMap := p.(map[any]any); !isAnyMap {
				return nil, invalid("parameters", fmt.Sprintf("must be a mapping (a JSON Schema), got %s", yamlType(p)))
			}
		}
		b, err := yamlToJSON(p)
		if err != nil {
			return nil, prefixed("parameters", err)
		}
		e.Parameters = b
	}
	if o, ok := m["options"]; ok && o != nil {
		if _, isMap := o.(map[string]any); !isMap {
			if _, isAnyMap := o.(map[any]any); !isAnyMap {
				return nil, invalid("options", fmt.Sprintf("must be a mapping, got %s", yamlType(o)))
			}
		}
		b, err := yamlToJSON(o)
		if err != nil {
			return nil, prefixed("options", err)
		}
		if err := json.Unmarshal(b, &e.Options); err != nil {
			var fe *FieldError
			if errors.As(err, &fe) {
				return nil, err
			}
			return nil, invalid("options", err.Error())
		}
	}
	return e, nil
}

// yamlToJSON converts a decoded YAML value into JSON.
func yamlToJSON(v any) (json.RawMessage, error) {
	j, err := toJSONValue(v, 0)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(j)
	if err != nil {
		return nil, invalid("", err.Error())
	}
	return b, nil
}

// toJSONValue converts YAML-decoded values to JSON-compatible ones:
// mappings must have string keys; timestamps become RFC 3339 strings;
// NaN and infinities are refused. Errors are *FieldError whose Field is
// the dotted path below the converted value.
func toJSONValue(v any, depth int) (any, error) {
	if depth > MaxYAMLDepth {
		return nil, invalid("", fmt.Sprintf("nested deeper than %d levels", MaxYAMLDepth))
	}
	switch x := v.(type) {
	case nil, bool, string, int, int64, uint64:
		return x, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, invalid("", fmt.Sprintf("%v has no JSON representation", x))
		}
		return x, nil
	case time.Time:
		return x.Format(time.RFC3339Nano), nil
	case []any:
		out := make([]any, len(x))
		for i, el := range x {
			j, err := toJSONValue(el, depth+1)
			if err != nil {
				return nil, atPath("["+strconv.Itoa(i)+"]", err)
			}
			out[i] = j
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for _, k := range sortedKeys(x) {
			j, err := toJSONValue(x[k], depth+1)
			if err != nil {
				return nil, atPath(k, err)
			}
			out[k] = j
		}
		return out, nil
	case map[any]any:
		for k := range x {
			if _, ok := k.(string); !ok {
				return nil, invalid("", fmt.Sprintf("mapping key %v (%s) is not a string (quote it)", k, yamlType(k)))
			}
		}
		m := make(map[string]any, len(x))
		for k, el := range x {
			m[k.(string)] = el
		}
		return toJSONValue(m, depth)
	}
	return nil, invalid("", fmt.Sprintf("unsupported YAML value of type %T", v))
}

// atPath prefixes a nested *FieldError path with elem.
func atPath(elem string, err error) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return err
	}
	f := elem
	switch {
	case fe.Field == "":
	case fe.Field[0] == '[':
		f = elem + fe.Field
	default:
		f = elem + "." + fe.Field
	}
	return &FieldError{Field: f, Msg: fe.Msg}
}

// yamlType names the YAML type of a decoded value for messages.
func yamlType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case int, int64, uint64:
		return "integer"
	case float64:
		return "number"
	case time.Time:
		return "timestamp"
	case []any:
		return "list"
	case map[string]any, map[any]any:
		return "mapping"
	}
	return fmt.Sprintf("%T", v)
}
