package cynodeconfig_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/config"
	"github.com/utpmesh/utpmesh/services/cynode"
	"github.com/utpmesh/utpmesh/services/cynode/cynodeconfig"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/internal/egress"
	"github.com/utpmesh/utpmesh/services/cynode/store"
)

func parse(t *testing.T, yaml string) (*config.File, error) {
	t.Helper()
	return config.Parse("mesh.yaml", []byte(yaml), cynodeconfig.Section())
}

func TestSectionErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown part", "cynode:\n  webb: {}\n", []string{`mesh.yaml:2: cynode: unknown key "webb"; did you mean "web"?`, "keys here: api, web"}},
		{"allowlist typo", "cynode:\n  web:\n    projects:\n      demo: {domain: [example.org]}\n", []string{`mesh.yaml:4: cynode.web.projects.demo: unknown key "domain"; did you mean "domains"?`}},
		{"allowlist kind", "cynode:\n  web:\n    projects:\n      demo: {domains: example.org}\n", []string{"mesh.yaml:4: cynode.web.projects.demo.domains: want a list, got text"}},
		{"allowlist host", "cynode:\n  web:\n    projects:\n      demo: {domains: ['https://example.org']}\n", []string{`mesh.yaml:2: cynode.web: cynode config: web.projects.demo.domains has "https://example.org"; use a lower-case host`}},
		{"provider without operations", "cynode:\n  api:\n    providers:\n      weather: {base_url: 'https://api.example.org', projects: [demo]}\n", []string{"mesh.yaml:2: cynode.api: cynode config: api.providers.weather.operations is empty"}},
		{"operation schema", "cynode:\n  api:\n    providers:\n      weather:\n        base_url: https://api.example.org\n        operations:\n          get: {method: GET, path: /x, params_schema: {type: object}, respons_schema: {}}\n",
			[]string{`mesh.yaml:7: cynode.api.providers.weather.operations.get: unknown key "respons_schema"; did you mean "response_schema"?`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, tc.yaml)
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("err = %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

// TestEgressAllowlistFromFile: the web.fetch allowlist the section sets
// is the one the service enforces (a host on it is fetched, one off it
// refused), and api providers with their operations reach the service.
func TestEgressAllowlistFromFile(t *testing.T) {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "hello from the allowed site")
	}))
	t.Cleanup(site.Close)
	ap := netip.MustParseAddrPort(strings.TrimPrefix(site.URL, "http://"))
	f, err := parse(t, fmt.Sprintf(`cynode:
  web:
    projects:
      %s:
        schemes: [http]
        domains: [allowed.test]
        ports: [%d]
    timeout_ms: 5000
  api:
    providers:
      weather:
        base_url: https://api.weather.example/v1
        projects: [%s]
        credential: {header: Authorization, prefix: "Bearer ", env: WEATHER_KEY}
        operations:
          forecast:
            method: GET
            path: /forecast/{city}
            params_schema:
              type: object
              required: [city]
              properties: {city: {type: string}}
`, ct.Project, ap.Port(), ct.Project))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := cynodeconfig.From(f)
	cfg := c.Overlay(ct.Config())
	if op := cfg.API.Providers["weather"].Operations["forecast"]; string(op.ParamsSchema) != `{"properties":{"city":{"type":"string"}},"required":["city"],"type":"object"}` || cfg.AccessPolicies == "" {
		t.Fatalf("overlaid config: %+v", cfg)
	}
	res := staticResolver{"allowed.test": ap.Addr(), "other.test": ap.Addr()}
	h := ct.StartEgress(t, cfg, &egress.Hooks{Resolver: res, Allow: []netip.AddrPort{ap}})
	ctx := context.Background()
	if err := errors.Join(h.Service.Store.PutProject(ctx, store.Project{ID: ct.Project, Slug: "demo", DisplayName: "Demo"}),
		h.Service.Store.PutTask(ctx, store.Task{ID: "t1", ProjectID: ct.Project, Title: "fetch", UserID: "alice"})); err != nil {
		t.Fatal(err)
	}
	got := h.OK(ct.PMAgent, "web.fetch", map[string]any{"task_id": "t1", "url": fmt.Sprintf("http://allowed.test:%d/", ap.Port())})
	if ct.Str(got, "text") != "hello from the allowed site" {
		t.Fatalf("fetch = %v", got)
	}
	msg := h.Fail(ct.PMAgent, "web.fetch", map[string]any{"task_id": "t1", "url": fmt.Sprintf("http://other.test:%d/", ap.Port())}, "policy_violation")
	if !strings.Contains(msg, "host other.test is not on this project's domain allowlist") {
		t.Fatalf("refusal: %s", msg)
	}
}

type staticResolver map[string]netip.Addr

func (r staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

// TestApplyKeepsTheRest: Apply reads (or writes) cynode.json and replaces
// only what the section sets; a file without the section changes nothing.
func TestApplyKeepsTheRest(t *testing.T) {
	dir := t.TempDir()
	f, err := parse(t, "cynode:\n  web:\n    projects:\n      demo: {domains: [example.org]}\n    search: {url: 'http://127.0.0.1:8888/search?token=s3cret'}\n")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	d := cynode.Deps{DataDir: dir}
	if err := cynodeconfig.Apply(f, &d, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, cynode.ConfigFile)); err != nil {
		t.Fatalf("cynode.json not written: %v", err)
	}
	if d.Config == nil || d.Config.Agents["demo-agent"].Type != cynode.PM || d.Config.Web.Projects["demo"].Domains[0] != "example.org" ||
		!strings.Contains(logs.String(), "egress allowlists demo=example.org; search http://127.0.0.1:8888/search)") || strings.Contains(logs.String(), "s3cret") {
		t.Fatalf("config %+v; logs %s", d.Config, logs.String())
	}
	empty, err := parse(t, "")
	if err != nil {
		t.Fatal(err)
	}
	d2 := cynode.Deps{DataDir: dir}
	if err := cynodeconfig.Apply(empty, &d2, nil); err != nil || d2.Config != nil {
		t.Fatalf("no section: %v %+v", err, d2.Config)
	}
}
