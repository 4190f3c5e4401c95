package config_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/config"
)

// hook is a test section: a typed value with required and secret keys,
// durations, lists, maps, raw JSON and a Validate method.
type hook struct {
	URL     string            `json:"url" config:"required"`
	Secret  string            `json:"secret,omitempty" config:"secret"`
	Timeout time.Duration     `json:"timeout,omitempty"`
	Retries int               `json:"retries,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

func (h hook) Validate() error {
	if !strings.HasPrefix(h.URL, "http") {
		return config.Fieldf("url", "%q is not an http(s) URL; write e.g. https://hooks.example.org/x", h.URL)
	}
	return nil
}

type demo struct {
	Hooks  []hook          `json:"hooks"`
	Enable bool            `json:"enable,omitempty"`
	Ratio  float64         `json:"ratio,omitempty"`
	Schema json.RawMessage `json:"schema,omitempty"`
	Limit  *int            `json:"limit,omitempty"`
}

var sections = []config.Section{
	{Name: "demo", Parse: func(n *config.Node) (any, error) {
		var d demo
		return d, n.Decode(&d)
	}},
	{Name: "other", Parse: func(n *config.Node) (any, error) {
		var m map[string]int
		return m, n.Decode(&m)
	}},
}

func TestParseValid(t *testing.T) {
	t.Setenv("CONFIG_TEST_SECRET", "s3cret")
	f, err := config.Parse("mesh.yaml", []byte(`
demo:
  enable: true
  ratio: 2
  limit: 7
  schema: {type: object, required: [a]}
  hooks:
    - url: https://hooks.example.org/a
      secret: ${CONFIG_TEST_SECRET}
      timeout: 1m30s
      headers: {X-Team: travel}
    - url: http://127.0.0.1:9/b
      secret: literal
other: {a: 1}
`), sections...)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := f.Section("demo")
	d := v.(demo)
	if !ok || !d.Enable || d.Ratio != 2 || *d.Limit != 7 || string(d.Schema) != `{"required":["a"],"type":"object"}` || len(d.Hooks) != 2 ||
		d.Hooks[0].Secret != "s3cret" || d.Hooks[0].Timeout != 90*time.Second || d.Hooks[0].Headers["X-Team"] != "travel" || d.Hooks[1].Secret != "literal" {
		t.Fatalf("demo = %+v", d)
	}
	if strings.Join(f.Names(), ",") != "demo,other" {
		t.Fatalf("names %v", f.Names())
	}
	if _, ok := f.Section("missing"); ok {
		t.Fatal("a section the file lacks is there")
	}
	empty, err := config.Parse("empty.yaml", []byte("# nothing yet\n"), sections...)
	if err != nil || len(empty.Names()) != 0 {
		t.Fatalf("empty file: %v %v", empty, err)
	}
}

// TestParseErrors: each mistake is named with its line, its key path and
// what to write instead.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown section", "demoo:\n  hooks: []\n", []string{`mesh.yaml:1: unknown section "demoo"`, `did you mean "demo"?`, "sections: demo, other"}},
		{"section twice", "demo: {}\ndemo: {}\n", []string{"mesh.yaml:2: demo: section given twice (first on line 1)"}},
		{"not yaml", "demo:\n  hooks: [\n", []string{"mesh.yaml:", "not valid YAML"}},
		{"two documents", "demo: {}\n---\nother: {}\n", []string{"mesh.yaml:2: a second YAML document (after ---)"}},
		{"not a mapping", "- demo\n", []string{"mesh.yaml:1: the file must be a mapping of sections (demo, other)"}},
		{"unknown key", "demo:\n  hooks:\n    - url: https://x.example\n      timout: 5s\n", []string{`mesh.yaml:4: demo.hooks[0]: unknown key "timout"; did you mean "timeout"?`, "keys here: headers, retries, secret, timeout, url"}},
		{"missing required", "demo:\n  hooks:\n    - secret: x\n", []string{`mesh.yaml:3: demo.hooks[0]: missing required key "url"`}},
		{"swapped letters", "demo:\n  hooks:\n    - url: https://x.example\n      sercet: x\n", []string{`mesh.yaml:4: demo.hooks[0]: unknown key "sercet"; did you mean "secret"?`}},
		{"bad duration", "demo:\n  hooks:\n    - url: https://x.example\n      timeout: 5\n", []string{`mesh.yaml:4: demo.hooks[0].timeout: "5" is not a duration; write a number with a unit, e.g. 10s`}},
		{"bad int", "demo:\n  hooks:\n    - url: https://x.example\n      retries: many\n", []string{`mesh.yaml:4: demo.hooks[0].retries: want a whole number, got "many"`}},
		{"bad bool", "demo:\n  enable: yes\n", []string{`mesh.yaml:2: demo.enable: want true or false, got "yes"`}},
		{"list wanted", "demo:\n  hooks: https://x.example\n", []string{"mesh.yaml:2: demo.hooks: want a list, got text"}},
		{"mapping wanted", "demo:\n  hooks:\n    - https://x.example\n", []string{"mesh.yaml:3: demo.hooks[0]: want a mapping of keys (headers, retries, secret, timeout, url), got text"}},
		{"validate names the key", "demo:\n  hooks:\n    - secret: x\n      url: ftp://x.example\n", []string{`mesh.yaml:4: demo.hooks[0].url: "ftp://x.example" is not an http(s) URL`}},
		{"key twice", "demo:\n  enable: true\n  enable: false\n", []string{"mesh.yaml:3: demo.enable: given twice (first on line 2)"}},
		{"secret env unset", "demo:\n  hooks:\n    - url: https://x.example\n      secret: ${CONFIG_TEST_UNSET}\n", []string{"mesh.yaml:4: demo.hooks[0].secret: the environment variable CONFIG_TEST_UNSET is not set"}},
		{"every error", "demo:\n  enable: 3\nother: {a: b}\nnope: 1\n", []string{"mesh.yaml:2: demo.enable", "mesh.yaml:3: other.a: want a whole number", `mesh.yaml:4: unknown section "nope"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("mesh.yaml", []byte(tc.yaml), sections...)
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

// TestSecretNeverInErrors: a secret of the wrong kind is reported by its
// kind, never its value.
func TestSecretNeverInErrors(t *testing.T) {
	_, err := config.Parse("mesh.yaml", []byte("demo:\n  hooks:\n    - url: https://x.example\n      secret: [hunter2]\n"), sections...)
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "demo.hooks[0].secret: want text, got a list") {
		t.Fatalf("err = %v", err)
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	if _, err := config.Load(path, sections...); !errors.Is(err, config.ErrRead) {
		t.Fatalf("missing file: %v", err)
	}
	if err := os.WriteFile(path, []byte("other: {a: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := config.Load(path, sections...)
	if err != nil || f.Path != path {
		t.Fatalf("%v %v", f, err)
	}
	if v, _ := f.Section("other"); v.(map[string]int)["a"] != 1 {
		t.Fatalf("other = %v", v)
	}
}
