package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Node is one value of the file with its position: a section, or a key
// under it.
type Node struct {
	file string
	path string
	key  *yaml.Node // the key that holds the value (nil for list items)
	y    *yaml.Node
}

// Path is the node's key path, e.g. atp.notify.smtp.
func (n *Node) Path() string { return n.path }

// Line is the node's line in the file.
func (n *Node) Line() int {
	if n.key != nil {
		return n.key.Line
	}
	return n.y.Line
}

// Errorf is an *Error at the node.
func (n *Node) Errorf(format string, args ...any) error {
	return &Error{File: n.file, Line: n.Line(), Path: n.path, Msg: fmt.Sprintf(format, args...)}
}

// Validator is a value the decoder checks once it is filled.
type Validator interface {
	Validate() error
}

// FieldError is a Validate error about one key of the struct, so that
// the error points at that key's line.
type FieldError struct {
	// Field is the key (its json name), e.g. "url".
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Fieldf returns a *FieldError.
func Fieldf(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Decode fills v (a pointer) from the node strictly (see the package
// doc). It reports every error it finds, joined.
func (n *Node) Decode(v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("config: Decode needs a non-nil pointer, got %T", v)
	}
	d := &decoder{file: n.file, env: os.LookupEnv}
	d.value(n, rv.Elem(), false)
	if len(d.errs) > 0 {
		return errors.Join(d.errs...)
	}
	return nil
}

type decoder struct {
	file string
	env  func(string) (string, bool)
	errs []error
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	rawType      = reflect.TypeFor[json.RawMessage]()
)

func (d *decoder) fail(n *Node, format string, args ...any) {
	d.errs = append(d.errs, n.Errorf(format, args...))
}

// kindName says what a YAML node is, for errors.
func kindName(y *yaml.Node) string {
	switch y.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch y.Tag {
	case "!!null":
		return "empty"
	case "!!int":
		return "a number"
	case "!!float":
		return "a decimal number"
	case "!!bool":
		return "true/false"
	}
	return "text"
}

func (d *decoder) value(n *Node, v reflect.Value, secret bool) {
	y := n.y
	if y.Kind == yaml.AliasNode {
		n = &Node{file: n.file, path: n.path, key: n.key, y: y.Alias}
		y = n.y
	}
	if v.Type() == rawType {
		var x any
		if err := y.Decode(&x); err != nil {
			d.fail(n, "%v", err)
			return
		}
		raw, err := json.Marshal(x)
		if err != nil {
			d.fail(n, "cannot be written as JSON: %v", err)
			return
		}
		v.SetBytes(raw)
		return
	}
	if v.Kind() == reflect.Pointer {
		if y.Tag == "!!null" {
			return
		}
		p := reflect.New(v.Type().Elem())
		d.value(n, p.Elem(), secret)
		v.Set(p)
		return
	}
	if v.Type() == durationType {
		if y.Kind != yaml.ScalarNode || y.Tag != "!!str" {
			d.fail(n, "%s is not a duration; write a number with a unit, e.g. 10s, 500ms or 1m30s", quoteUnlessSecret(y, secret))
			return
		}
		dur, err := time.ParseDuration(y.Value)
		if err != nil || dur < 0 {
			d.fail(n, "%s is not a duration; write a number with a unit, e.g. 10s, 500ms or 1m30s", quoteUnlessSecret(y, secret))
			return
		}
		v.SetInt(int64(dur))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.structure(n, v)
	case reflect.Map:
		d.mapping(n, v, secret)
	case reflect.Slice:
		if y.Kind != yaml.SequenceNode {
			if y.Tag == "!!null" {
				return
			}
			d.fail(n, "want a list, got %s; write it as [a, b] or one \"- item\" per line", kindName(y))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(y.Content), len(y.Content))
		for i, item := range y.Content {
			d.value(&Node{file: n.file, path: fmt.Sprintf("%s[%d]", n.path, i), y: item}, s.Index(i), secret)
		}
		v.Set(s)
	case reflect.String:
		if y.Kind != yaml.ScalarNode || y.Tag == "!!null" {
			d.fail(n, "want text, got %s", kindName(y))
			return
		}
		s := y.Value
		if secret {
			s = d.expand(n, s)
		}
		v.SetString(s)
	case reflect.Bool:
		if y.Kind != yaml.ScalarNode || y.Tag != "!!bool" {
			d.fail(n, "want true or false, got %s", quoteUnlessSecret(y, secret))
			return
		}
		v.SetBool(y.Value == "true")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i, err := strconv.ParseInt(y.Value, 0, v.Type().Bits())
		if y.Kind != yaml.ScalarNode || y.Tag != "!!int" || err != nil {
			d.fail(n, "want a whole number, got %s", quoteUnlessSecret(y, secret))
			return
		}
		v.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u, err := strconv.ParseUint(y.Value, 0, v.Type().Bits())
		if y.Kind != yaml.ScalarNode || y.Tag != "!!int" || err != nil {
			d.fail(n, "want a whole number of 0 or more, got %s", quoteUnlessSecret(y, secret))
			return
		}
		v.SetUint(u)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(y.Value, v.Type().Bits())
		if y.Kind != yaml.ScalarNode || (y.Tag != "!!int" && y.Tag != "!!float") || err != nil {
			d.fail(n, "want a number, got %s", quoteUnlessSecret(y, secret))
			return
		}
		v.SetFloat(f)
	case reflect.Interface:
		var x any
		if err := y.Decode(&x); err != nil {
			d.fail(n, "%v", err)
			return
		}
		if x != nil {
			v.Set(reflect.ValueOf(x))
		}
	default:
		d.fail(n, "the program cannot read a %s here (a bug: report it)", v.Type())
	}
}

// quoteUnlessSecret shows a scalar's value in an error, or only its kind
// for a secret.
func quoteUnlessSecret(y *yaml.Node, secret bool) string {
	if secret || y.Kind != yaml.ScalarNode {
		return kindName(y)
	}
	return strconv.Quote(y.Value)
}

// expand reads a secret written as ${NAME} from the environment.
func (d *decoder) expand(n *Node, s string) string {
	if !strings.HasPrefix(s, "${") || !strings.HasSuffix(s, "}") {
		return s
	}
	name := s[2 : len(s)-1]
	val, ok := d.env(name)
	if !ok || val == "" {
		d.fail(n, "the environment variable %s is not set; export it, or write the secret itself", name)
		return ""
	}
	return val
}

// field is one key of a struct.
type field struct {
	name     string
	index    []int
	required bool
	secret   bool
}

func fieldsOf(t reflect.Type) []field {
	var out []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for _, sub := range fieldsOf(f.Type) {
				sub.index = append([]int{i}, sub.index...)
				out = append(out, sub)
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		opts := "," + f.Tag.Get("config") + ","
		out = append(out, field{name: name, index: []int{i}, required: strings.Contains(opts, ",required,"), secret: strings.Contains(opts, ",secret,")})
	}
	return out
}

func (d *decoder) structure(n *Node, v reflect.Value) {
	y := n.y
	start := len(d.errs)
	if y.Kind != yaml.MappingNode {
		if y.Tag == "!!null" && !hasRequired(v.Type()) {
			d.validate(n, v, nil, start)
			return
		}
		d.fail(n, "want a mapping of keys (%s), got %s", strings.Join(names(fieldsOf(v.Type())), ", "), kindName(y))
		return
	}
	fields := fieldsOf(v.Type())
	byName := map[string]field{}
	for _, f := range fields {
		byName[f.name] = f
	}
	keys := map[string]*yaml.Node{}
	for i := 0; i+1 < len(y.Content); i += 2 {
		k, val := y.Content[i], y.Content[i+1]
		path := n.path + "." + k.Value
		if k.Value == "<<" {
			d.fail(&Node{file: n.file, path: n.path, key: k, y: val}, "merge keys (<<) are not supported; write the keys out")
			continue
		}
		if prev, dup := keys[k.Value]; dup {
			d.fail(&Node{file: n.file, path: path, key: k, y: val}, "given twice (first on line %d); keep one", prev.Line)
			continue
		}
		keys[k.Value] = k
		f, ok := byName[k.Value]
		if !ok {
			msg := fmt.Sprintf("unknown key %q", k.Value)
			if m := nearest(k.Value, names(fields)); m != "" {
				msg += fmt.Sprintf("; did you mean %q?", m)
			}
			msg += " (keys here: " + strings.Join(names(fields), ", ") + ")"
			d.fail(&Node{file: n.file, path: n.path, key: k, y: val}, "%s", msg)
			continue
		}
		d.value(&Node{file: n.file, path: path, key: k, y: val}, v.FieldByIndex(f.index), f.secret)
	}
	for _, f := range fields {
		if f.required && keys[f.name] == nil {
			d.fail(n, "missing required key %q; add \"%s: …\" under %s", f.name, f.name, n.path)
		}
	}
	d.validate(n, v, keys, start)
}

// validate runs the struct's Validate method, if it has one, unless
// reading the struct found errors since start (checks of a half-read
// value would only repeat them).
func (d *decoder) validate(n *Node, v reflect.Value, keys map[string]*yaml.Node, start int) {
	if !v.CanAddr() || len(d.errs) > start {
		return
	}
	val, ok := v.Addr().Interface().(Validator)
	if !ok {
		return
	}
	err := val.Validate()
	if err == nil {
		return
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		at := &Node{file: n.file, path: n.path + "." + fe.Field, key: keys[fe.Field], y: n.y}
		d.fail(at, "%s", fe.Msg)
		return
	}
	d.fail(n, "%v", err)
}

func (d *decoder) mapping(n *Node, v reflect.Value, secret bool) {
	y := n.y
	if y.Kind != yaml.MappingNode {
		if y.Tag == "!!null" {
			return
		}
		d.fail(n, "want a mapping (name: value), got %s", kindName(y))
		return
	}
	if v.Type().Key().Kind() != reflect.String {
		d.fail(n, "the program cannot read a %s here (a bug: report it)", v.Type())
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(y.Content)/2)
	seen := map[string]int{}
	for i := 0; i+1 < len(y.Content); i += 2 {
		k, val := y.Content[i], y.Content[i+1]
		kn := &Node{file: n.file, path: n.path + "." + k.Value, key: k, y: val}
		if prev, dup := seen[k.Value]; dup {
			d.fail(kn, "given twice (first on line %d); keep one", prev)
			continue
		}
		seen[k.Value] = k.Line
		e := reflect.New(v.Type().Elem()).Elem()
		d.value(kn, e, secret)
		m.SetMapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key()), e)
	}
	v.Set(m)
}

func hasRequired(t reflect.Type) bool {
	for _, f := range fieldsOf(t) {
		if f.required {
			return true
		}
	}
	return false
}

func names(fs []field) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.name
	}
	sort.Strings(out)
	return out
}
