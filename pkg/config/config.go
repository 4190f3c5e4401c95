package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/utpmesh/utpmesh/internal/suggest"
)

// Errors of the package.
var (
	// ErrInvalid: the file is not valid YAML, or a section does not
	// describe a valid configuration; the error is one or more *Error.
	ErrInvalid = errors.New("config: invalid")
	// ErrRead: the file could not be read.
	ErrRead = errors.New("config: cannot read the file")
)

// Section is one top-level section of the file and the parser that
// turns it into its owner's typed configuration.
type Section struct {
	// Name is the top-level key, e.g. "atp".
	Name string
	// Parse reads the section; its result is what File.Section returns.
	// Errors should come from Node (Errorf, Decode) so that they carry
	// the file, line and key path.
	Parse func(n *Node) (any, error)
}

// File is a loaded and validated configuration file.
type File struct {
	// Path is the file it was read from.
	Path     string
	sections map[string]any
}

// Section returns the parsed value of a section, and whether the file
// has it.
func (f *File) Section(name string) (any, bool) {
	if f == nil {
		return nil, false
	}
	v, ok := f.sections[name]
	return v, ok
}

// Names lists the sections the file has, sorted.
func (f *File) Names() []string {
	if f == nil {
		return nil
	}
	out := make([]string, 0, len(f.sections))
	for n := range f.sections {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Load reads and validates the file at path with the given sections.
func Load(path string, sections ...Section) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrRead, path, err)
	}
	return Parse(path, data, sections...)
}

// Parse validates data, named name in errors, with the given sections.
// Every section of the file is parsed, and every error found is
// returned (joined), not only the first.
func Parse(name string, data []byte, sections ...Section) (*File, error) {
	byName := map[string]Section{}
	var known []string
	for _, s := range sections {
		byName[s.Name] = s
		known = append(known, s.Name)
	}
	sort.Strings(known)
	f := &File{Path: name, sections: map[string]any{}}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, &Error{File: name, Line: yamlLine(err), Msg: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		line := more.Line
		if err != nil {
			line = yamlLine(err)
		}
		return nil, &Error{File: name, Line: line, Msg: "a second YAML document (after ---): the file holds one; merge them"}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return f, nil // an empty file configures nothing
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: name, Line: root.Line, Msg: "the file must be a mapping of sections (" + strings.Join(known, ", ") + "), e.g. \"atp:\" on the first line"}
	}
	var errs []error
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if prev, dup := seen[k.Value]; dup {
			errs = append(errs, &Error{File: name, Line: k.Line, Path: k.Value, Msg: fmt.Sprintf("section given twice (first on line %d); merge the two", prev)})
			continue
		}
		seen[k.Value] = k.Line
		s, ok := byName[k.Value]
		if !ok {
			msg := fmt.Sprintf("unknown section %q: no catalogue of this build reads it (sections: %s)", k.Value, orNone(known))
			if m := nearest(k.Value, known); m != "" {
				msg += fmt.Sprintf("; did you mean %q?", m)
			}
			errs = append(errs, &Error{File: name, Line: k.Line, Msg: msg})
			continue
		}
		val, err := s.Parse(&Node{file: name, path: k.Value, key: k, y: v})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f.sections[k.Value] = val
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return f, nil
}

// Error is one problem found in the file.
type Error struct {
	File string
	Line int
	// Path is the key path, e.g. atp.notify.smtp.port; "" for the file.
	Path string
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// yamlLine finds the line number in a yaml.v3 error ("yaml: line 3: …").
func yamlLine(err error) int {
	var n int
	msg := err.Error()
	if i := strings.Index(msg, "line "); i >= 0 {
		_, _ = fmt.Sscanf(msg[i:], "line %d", &n)
	}
	return n
}

// nearest is the "did you mean" candidate for a mistyped key: one with
// two neighbouring letters swapped (smpt → smtp) first, else the nearest
// by edit distance (internal/suggest).
func nearest(key string, candidates []string) string {
	k := strings.ToLower(key)
	for _, c := range candidates {
		lc := strings.ToLower(c)
		if len(lc) != len(k) {
			continue
		}
		for i := 0; i+1 < len(k); i++ {
			if k[i] != lc[i] {
				if k[i] == lc[i+1] && k[i+1] == lc[i] && k[i+2:] == lc[i+2:] {
					return c
				}
				break
			}
		}
	}
	return suggest.Nearest(key, candidates, suggest.Limit(len(key), 2), true)
}
