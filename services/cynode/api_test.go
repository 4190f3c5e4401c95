package cynode_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/utpmesh/utpmesh/services/cynode"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/internal/egress"
)

const (
	weatherToken = "wx-SECRET-token-4242"
	fileToken    = "file-SECRET-key-1717"
)

type apiEnv struct {
	h    *ct.Harness
	mu   sync.Mutex
	seen []*http.Request
	body []string
}

func (e *apiEnv) last() (*http.Request, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen[len(e.seen)-1], e.body[len(e.body)-1]
}

func startAPI(t *testing.T) *apiEnv {
	t.Helper()
	e := &apiEnv{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.seen, e.body = append(e.seen, r), append(e.body, string(b))
		e.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Set-Cookie", "session="+weatherToken)
		w.Header().Set("X-Api-Key", fileToken)
		w.Header().Set("Www-Authenticate", "Bearer realm=x")
		w.Header().Set("X-Upstream-Token", weatherToken)
		w.Header().Set("X-Ratelimit-Remaining", "9")
		switch {
		case strings.HasPrefix(r.URL.Path, "/v1/forecast/"):
			// An echoing provider: the credential comes back in the body.
			fmt.Fprintf(w, `{"city":%q,"temp":21,"echo":%q,"key":%q}`, strings.TrimPrefix(r.URL.Path, "/v1/forecast/"), r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
		case r.URL.Path == "/v1/shape":
			fmt.Fprint(w, `{"temp":"hot"}`)
		case r.URL.Path == "/v1/big":
			fmt.Fprintf(w, `{"x":%q}`, strings.Repeat("a", 5000))
		case r.URL.Path == "/v1/notes":
			fmt.Fprintf(w, `{"stored":%s}`, b)
		case r.URL.Path == "/v1/fail":
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, `{"error":"bad key %s"}`, r.Header.Get("Authorization"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	ap := netip.MustParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
	inner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Errorf("the internal server was reached: %s", r.URL) }))
	t.Cleanup(inner.Close)
	t.Setenv("UTPMESH_TEST_WEATHER_TOKEN", weatherToken)

	cfg := ct.Config()
	ops := map[string]cynode.APIOperation{
		"forecast": {Method: "GET", Path: "/forecast/{city}",
			ParamsSchema:   json.RawMessage(`{"type":"object","additionalProperties":false,"required":["city"],"properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":7}}}`),
			ResponseSchema: json.RawMessage(`{"type":"object","required":["temp"],"properties":{"temp":{"type":"number"}}}`)},
		"shape": {Method: "GET", Path: "/shape", ParamsSchema: json.RawMessage(`{"type":"object"}`),
			ResponseSchema: json.RawMessage(`{"type":"object","properties":{"temp":{"type":"number"}}}`)},
		"big":   {Method: "GET", Path: "/big", ParamsSchema: json.RawMessage(`{"type":"object"}`)},
		"notes": {Method: "POST", Path: "/notes", ParamsSchema: json.RawMessage(`{"type":"object","required":["text"],"properties":{"text":{"type":"string"}}}`)},
		"fail":  {Method: "GET", Path: "/fail", ParamsSchema: json.RawMessage(`{"type":"object"}`)},
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(fileToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.API = cynode.APIConfig{MaxResponseBytes: 4096, Providers: map[string]cynode.APIProvider{
		"weather":  {BaseURL: srv.URL + "/v1", Projects: []string{ct.Project}, Operations: ops, Credential: &cynode.APICredential{Header: "Authorization", Prefix: "Bearer ", Env: "UTPMESH_TEST_WEATHER_TOKEN"}},
		"keyed":    {BaseURL: srv.URL + "/v1", Projects: []string{ct.Project}, Operations: ops, Credential: &cynode.APICredential{Header: "X-Api-Key", File: keyFile}},
		"unset":    {BaseURL: srv.URL + "/v1", Projects: []string{ct.Project}, Operations: ops, Credential: &cynode.APICredential{Header: "Authorization", Env: "UTPMESH_TEST_NO_SUCH_VAR"}},
		"theirs":   {BaseURL: srv.URL + "/v1", Projects: []string{ct.Other}, Operations: ops},
		"internal": {BaseURL: inner.URL, Projects: []string{ct.Project}, Operations: ops},
	}}
	e.h = ct.StartEgress(t, cfg, &egress.Hooks{Allow: []netip.AddrPort{ap}})
	seed(t, e.h)
	return e
}

func apiArgs(provider, op string, params map[string]any) map[string]any {
	return map[string]any{"task_id": "t1", "provider": provider, "operation": op, "params": params}
}

func TestAPICall(t *testing.T) {
	e := startAPI(t)
	r := e.h.Call(ct.SandboxAgent, "api.call", apiArgs("weather", "forecast", map[string]any{"city": "Zürich", "days": 3}))
	got := r.Value()
	req, _ := e.last()
	if req.Header.Get("Authorization") != "Bearer "+weatherToken || req.URL.Query().Get("days") != "3" || req.URL.Path != "/v1/forecast/Zürich" {
		t.Fatalf("provider saw %s %v", req.URL, req.Header)
	}
	if ct.Get(got, "body", "temp") != float64(21) || ct.Str(got, "body", "echo") != "Bearer "+cynodeRedacted || got["http_status"] != float64(200) {
		t.Fatalf("result = %v", got)
	}
	if h := got["headers"].(map[string]any); len(h) != 2 || h["content-type"] != "application/json" || h["x-ratelimit-remaining"] != "9" {
		t.Fatalf("headers = %v (only the allowlisted ones may pass)", h)
	}
	keyed := e.h.OK(ct.PMAgent, "api.call", apiArgs("keyed", "forecast", map[string]any{"city": "x"}))
	if req, _ := e.last(); req.Header.Get("X-Api-Key") != fileToken || ct.Str(keyed, "body", "key") != cynodeRedacted {
		t.Fatalf("file credential: sent %q, result %v", req.Header.Get("X-Api-Key"), keyed)
	}
	// A path parameter cannot climb out of the operation's path.
	e.h.OK(ct.PMAgent, "api.call", apiArgs("weather", "forecast", map[string]any{"city": "../admin?x=1"}))
	if req, _ := e.last(); req.RequestURI != "/v1/forecast/..%2Fadmin%3Fx=1" {
		t.Fatalf("escaped path: %s", req.RequestURI)
	}
	posted := e.h.OK(ct.PMAgent, "api.call", apiArgs("weather", "notes", map[string]any{"text": "hi"}))
	if _, body := e.last(); body != `{"text":"hi"}` || ct.Str(posted, "body", "stored", "text") != "hi" {
		t.Fatalf("POST sent %s, got %v", body, posted)
	}

	for _, tc := range []struct {
		name, provider, op string
		params             map[string]any
		typ, says          string
	}{
		{"params against the schema", "weather", "forecast", map[string]any{"city": "x", "days": "many"}, "invalid_argument", "params/days"},
		{"undeclared param", "weather", "forecast", map[string]any{"city": "x", "debug": true}, "invalid_argument", "params"},
		{"undeclared operation", "weather", "delete_all", map[string]any{}, "not_found", "operations: [big fail forecast notes shape]"},
		{"undeclared provider", "evil", "forecast", map[string]any{}, "not_found", "declared: [internal keyed unset weather]"},
		{"another project's provider", "theirs", "forecast", map[string]any{"city": "x"}, "not_found", "not declared for project demo"},
		{"response against its schema", "weather", "shape", map[string]any{}, "upstream_error", "response/temp"},
		{"response size", "weather", "big", map[string]any{}, "size_limit_exceeded", "api.max_response_bytes"},
		{"provider error", "weather", "fail", map[string]any{}, "upstream_error", "HTTP 403"},
		{"credential missing", "unset", "big", map[string]any{}, "unavailable", "UTPMESH_TEST_NO_SUCH_VAR is unset"},
		{"internal address", "internal", "big", map[string]any{}, "policy_violation", "loopback"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := e.h.Fail(ct.PMAgent, "api.call", apiArgs(tc.provider, tc.op, tc.params), tc.typ)
			if !strings.Contains(msg, tc.says) {
				t.Fatalf("message %q does not say %q", msg, tc.says)
			}
		})
	}
	audit := e.h.AuditRaw()
	if !strings.Contains(audit, `"tool":"api.call"`) {
		t.Fatal("no audit records of api.call")
	}
	if strings.Contains(audit, weatherToken) || strings.Contains(audit, fileToken) || strings.Contains(string(r.Raw), weatherToken) {
		t.Fatal("a credential reached the audit trail or a result")
	}
}

const cynodeRedacted = "[redacted]"
