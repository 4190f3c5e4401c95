package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/utpmesh/utpmesh/services/cynode/api"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/internal/egress"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
)

const secret = "s3cr3t-VALUE-9876"

// provider is a local HTTP API that records what it was sent.
type provider struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []seen
}

type seen struct {
	method, uri, body string
	header            http.Header
}

func (p *provider) last(t *testing.T) seen {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.reqs) == 0 {
		t.Fatal("the provider was not called")
	}
	return p.reqs[len(p.reqs)-1]
}

func (p *provider) count() int { p.mu.Lock(); defer p.mu.Unlock(); return len(p.reqs) }

func startProvider(t *testing.T) *provider {
	t.Helper()
	p := &provider{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		p.reqs = append(p.reqs, seen{method: r.Method, uri: r.RequestURI, body: string(b), header: r.Header.Clone()})
		p.mu.Unlock()
		w.Header().Set("X-Request-Id", "rid-1")
		w.Header().Set("Set-Cookie", "sid="+secret)
		w.Header().Set("X-Secret-Token", secret)
		switch strings.TrimPrefix(r.URL.Path, "/v1") {
		case "/json":
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			fmt.Fprintf(w, `{"ok":true,"echo":%q}`, r.Header.Get("X-Key"))
		case "/problem":
			w.Header().Set("Content-Type", "application/problem+json")
			fmt.Fprint(w, `{"title":"t"}`)
		case "/text":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, "hello \xff "+secret)
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/binary":
			w.Header().Set("Content-Type", "application/octet-stream")
			fmt.Fprint(w, "\x00\x01")
		case "/broken":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"ok":`)
		case "/redirect":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data", http.StatusFound)
		case "/down":
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, secret)
		case "/hang":
			<-r.Context().Done()
		case "/exact":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, strings.Repeat("x", 64))
		case "/over":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, strings.Repeat("x", 65))
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{}`)
		}
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func addr(t *testing.T, url string) netip.AddrPort {
	t.Helper()
	return netip.MustParseAddrPort(strings.TrimPrefix(url, "http://"))
}

func op(method, path, params string) gateway.APIOperation {
	return gateway.APIOperation{Method: method, Path: path, ParamsSchema: json.RawMessage(params)}
}

const anyParams = `{"type":"object"}`

type env struct {
	d    *ct.Direct
	p    *provider
	call gateway.Spec
}

func start(t *testing.T) *env { t.Helper(); return startTimeout(t, 0) }

// startTimeout is start with api.timeout_ms ms (0: the default, 15 s).
func startTimeout(t *testing.T, ms int) *env {
	t.Helper()
	p := startProvider(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "key"), []byte("  "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "blank"), []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CYNODE_API_TEST_SECRET", secret)
	// A closed port: nothing listens there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	_ = l.Close()

	ops := map[string]gateway.APIOperation{
		"json": op("GET", "/json", anyParams), "problem": op("GET", "/problem", anyParams), "text": op("GET", "/text", anyParams),
		"empty": op("GET", "/empty", anyParams), "binary": op("GET", "/binary", anyParams), "broken": op("GET", "/broken", anyParams),
		"redirect": op("GET", "/redirect", anyParams), "down": op("GET", "/down", anyParams), "hang": op("GET", "/hang", anyParams),
		"exact": op("GET", "/exact", anyParams), "over": op("GET", "/over", anyParams),
		"item":       op("GET", "/items/{id}/detail", `{"type":"object","properties":{"id":{}}}`),
		"search":     op("GET", "/search", `{"type":"object"}`),
		"remove":     op("DELETE", "/items/{id}", `{"type":"object","required":["id"]}`),
		"create":     op("POST", "/items/{kind}", `{"type":"object","required":["kind"]}`),
		"shaped":     {Method: "GET", Path: "/json", ParamsSchema: json.RawMessage(anyParams), ResponseSchema: json.RawMessage(`{"type":"object","required":["ok"],"properties":{"ok":{"type":"boolean"}}}`)},
		"misshaped":  {Method: "GET", Path: "/problem", ParamsSchema: json.RawMessage(anyParams), ResponseSchema: json.RawMessage(`{"type":"object","required":["ok"]}`)},
		"shapedtext": {Method: "GET", Path: "/text", ParamsSchema: json.RawMessage(anyParams), ResponseSchema: json.RawMessage(`{"type":"object"}`)},
		"typed":      op("GET", "/json", `{"type":"object","additionalProperties":false,"properties":{"n":{"type":"integer"}}}`),
	}
	base := p.srv.URL + "/v1"
	cfg := gateway.APIConfig{MaxResponseBytes: 64, TimeoutMS: ms, Providers: map[string]gateway.APIProvider{
		"env":     {BaseURL: base, Projects: []string{ct.Project}, Operations: ops, Credential: &gateway.APICredential{Header: "X-Key", Prefix: "K ", Env: "CYNODE_API_TEST_SECRET"}},
		"file":    {BaseURL: base + "/", Projects: []string{ct.Project}, Operations: ops, Credential: &gateway.APICredential{Header: "X-Key", File: "key"}},
		"abs":     {BaseURL: base, Projects: []string{ct.Project}, Operations: ops, Credential: &gateway.APICredential{Header: "X-Key", File: filepath.Join(dir, "key")}},
		"blank":   {BaseURL: base, Projects: []string{ct.Project}, Operations: ops, Credential: &gateway.APICredential{Header: "X-Key", File: "blank"}},
		"nofile":  {BaseURL: base, Projects: []string{ct.Project}, Operations: ops, Credential: &gateway.APICredential{Header: "X-Key", File: "missing"}},
		"reqid":   {BaseURL: base, Projects: []string{ct.Project}, Operations: ops, Credential: &gateway.APICredential{Header: "X-Request-Id", Env: "CYNODE_API_TEST_SECRET"}},
		"open":    {BaseURL: base, Projects: []string{ct.Project, ct.Other}, Operations: ops},
		"theirs":  {BaseURL: base, Projects: []string{ct.Other}, Operations: ops},
		"nobody":  {BaseURL: base, Operations: ops},
		"closed":  {BaseURL: "http://" + closed, Projects: []string{ct.Project}, Operations: ops},
		"private": {BaseURL: "http://10.0.0.1:9", Projects: []string{ct.Project}, Operations: ops},
	}}
	s, err := api.New(cfg, dir, &egress.Hooks{Allow: []netip.AddrPort{addr(t, p.srv.URL), netip.MustParseAddrPort(closed)}})
	if err != nil {
		t.Fatal(err)
	}
	d := ct.NewDirect(t, nil)
	d.Seed()
	return &env{d: d, p: p, call: d.Spec(api.Specs(s), api.ToolCall)}
}

func args(provider, operation string, params any) map[string]any {
	if params == nil {
		params = map[string]any{}
	}
	return map[string]any{"task_id": "t1", "provider": provider, "operation": operation, "params": params}
}

func TestResponses(t *testing.T) {
	e := start(t)
	for _, tc := range []struct {
		name, provider, op string
		check              func(t *testing.T, got map[string]any)
	}{
		{"json, credential from env, echo redacted", "env", "json", func(t *testing.T, got map[string]any) {
			if ct.Get(got, "body", "ok") != true || ct.Str(got, "body", "echo") != "K "+api.Redacted || got["http_status"] != float64(200) {
				t.Fatalf("result %v", got)
			}
			if h := e.p.last(t).header.Get("X-Key"); h != "K "+secret {
				t.Fatalf("the provider got X-Key %q", h)
			}
		}},
		{"credential from a file, trimmed", "file", "json", func(t *testing.T, got map[string]any) {
			if h := e.p.last(t).header.Get("X-Key"); h != secret {
				t.Fatalf("the provider got X-Key %q", h)
			}
		}},
		{"credential from an absolute file", "abs", "json", func(t *testing.T, got map[string]any) {
			if h := e.p.last(t).header.Get("X-Key"); h != secret {
				t.Fatalf("the provider got X-Key %q", h)
			}
		}},
		{"+json", "open", "problem", func(t *testing.T, got map[string]any) {
			if ct.Str(got, "body", "title") != "t" {
				t.Fatalf("result %v", got)
			}
		}},
		{"text, redacted and valid UTF-8", "env", "text", func(t *testing.T, got map[string]any) {
			if got["body_text"] != "hello \uFFFD "+api.Redacted || got["body"] != nil {
				t.Fatalf("result %v", got)
			}
		}},
		{"empty", "open", "empty", func(t *testing.T, got map[string]any) {
			if got["body_text"] != "" || got["http_status"] != float64(204) {
				t.Fatalf("result %v", got)
			}
		}},
		{"exactly the size limit", "open", "exact", func(t *testing.T, got map[string]any) {
			if len(ct.Str(got, "body_text")) != 64 {
				t.Fatalf("result %v", got)
			}
		}},
		{"response schema", "open", "shaped", func(t *testing.T, got map[string]any) {
			if ct.Get(got, "body", "ok") != true {
				t.Fatalf("result %v", got)
			}
		}},
		{"credential header never returned", "reqid", "json", func(t *testing.T, got map[string]any) {
			if h := got["headers"].(map[string]any); h["x-request-id"] != nil {
				t.Fatalf("headers %v returned the credential's header", h)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := e.d.For(t).OK(e.call, ct.PMAgent, args(tc.provider, tc.op, nil))
			if got["provider"] != tc.provider || got["operation"] != tc.op {
				t.Fatalf("result %v", got)
			}
			raw, _ := json.Marshal(got)
			if strings.Contains(string(raw), secret) {
				t.Fatalf("the credential is in the result: %s", raw)
			}
			// Only allowlisted headers pass.
			for k := range got["headers"].(map[string]any) {
				if k != "content-type" && k != "x-request-id" {
					t.Fatalf("header %s passed", k)
				}
			}
			tc.check(t, got)
		})
	}
}

func TestRequests(t *testing.T) {
	e := start(t)
	for _, tc := range []struct {
		name, op    string
		params      map[string]any
		method, uri string
		body, ctype string
	}{
		{"query of scalars and lists", "search", map[string]any{"q": "a b&c", "n": 2, "on": true, "tag": []any{"x", 1.5}}, "GET", "/v1/search?n=2&on=true&q=a+b%26c&tag=x&tag=1.5", "", ""},
		{"path placeholder, escaped", "item", map[string]any{"id": "a/b?c", "x": 1}, "GET", "/v1/items/a%2Fb%3Fc/detail?x=1", "", ""},
		{"number placeholder", "item", map[string]any{"id": 42}, "GET", "/v1/items/42/detail", "", ""},
		{"numbers as sent", "item", map[string]any{"id": json.Number("1000000"), "big": json.Number("12345678901234567890"), "f": 0.5, "e": json.Number("1e3")}, "GET", "/v1/items/1000000/detail?big=12345678901234567890&e=1e3&f=0.5", "", ""},
		{"numbers in a body as sent", "create", map[string]any{"kind": json.Number("1000000"), "n": json.Number("12345678901234567890")}, "POST", "/v1/items/1000000", `{"n":12345678901234567890}`, "application/json"},
		{"delete takes a query", "remove", map[string]any{"id": "x", "hard": true}, "DELETE", "/v1/items/x?hard=true", "", ""},
		{"post takes a JSON body without the placeholders", "create", map[string]any{"kind": "note", "text": "hi", "meta": map[string]any{"a": 1}}, "POST", "/v1/items/note", `{"meta":{"a":1},"text":"hi"}`, "application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.d.For(t).OK(e.call, ct.PMAgent, args("open", tc.op, tc.params))
			got := e.p.last(t)
			if got.method != tc.method || got.uri != tc.uri || got.body != tc.body || got.header.Get("Content-Type") != tc.ctype {
				t.Fatalf("sent %s %s %q (%s); want %s %s %q (%s)", got.method, got.uri, got.body, got.header.Get("Content-Type"), tc.method, tc.uri, tc.body, tc.ctype)
			}
			if got.header.Get("Accept") != "application/json" || got.header.Get("User-Agent") != "utpmesh-cynode/1.0" || got.header.Get("X-Key") != "" {
				t.Fatalf("headers %v", got.header)
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	e := start(t)
	for _, tc := range []struct {
		name, provider, op string
		params             any
		typ, says          string
		sent               bool // the provider was called
	}{
		{"undeclared provider", "nope", "json", nil, "not_found", `provider "nope" is not declared for project demo (declared: [abs blank closed env file nofile open private reqid]); the operator declares providers under api.providers`, false},
		{"another project's provider", "theirs", "json", nil, "not_found", "is not declared for project demo", false},
		{"a provider of no project", "nobody", "json", nil, "not_found", "is not declared for project demo", false},
		{"undeclared operation", "open", "drop", nil, "not_found", `provider open has no operation "drop" (operations: [binary broken create`, false},
		{"params against the schema", "open", "typed", map[string]any{"n": "x"}, "invalid_argument", "open.typed: params/n", false},
		{"undeclared param", "open", "typed", map[string]any{"m": 1}, "invalid_argument", "open.typed:", false},
		{"params not an object", "open", "json", []any{1}, "invalid_argument", "", false},
		{"missing placeholder", "open", "item", map[string]any{}, "invalid_argument", "params.id is required (the path /items/{id}/detail uses it)", false},
		{"placeholder not a scalar", "open", "item", map[string]any{"id": []any{"a"}}, "invalid_argument", "params.id goes into the path and must be a string, number or boolean", false},
		{"placeholder '..'", "open", "item", map[string]any{"id": ".."}, "invalid_argument", `params.id goes into the path and may not be empty, "." or ".."`, false},
		{"placeholder '.'", "open", "item", map[string]any{"id": "."}, "invalid_argument", "params.id goes into the path", false},
		{"empty placeholder", "open", "item", map[string]any{"id": ""}, "invalid_argument", "params.id goes into the path", false},
		{"query of an object", "open", "search", map[string]any{"q": map[string]any{}}, "invalid_argument", "params.q goes into the query and must be a string, number, boolean or a list of them", false},
		{"query list of objects", "open", "search", map[string]any{"q": []any{map[string]any{}}}, "invalid_argument", "params.q goes into the query and must hold strings", false},
		{"null in the query", "open", "search", map[string]any{"q": nil}, "invalid_argument", "params.q", false},
		{"credential unset", "env", "json", nil, "", "", false},
		{"credential file missing", "nofile", "json", nil, "unavailable", "its file (api.providers.nofile.credential.file) cannot be read", false},
		{"credential file blank", "blank", "json", nil, "unavailable", "the credential of provider blank is not available: its file (api.providers.blank.credential.file) is empty", false},
		{"binary response", "open", "binary", nil, "upstream_error", `open.binary sent "application/octet-stream"; api.call returns JSON or text only`, true},
		{"broken JSON", "open", "broken", nil, "upstream_error", "open.broken sent application/json that is not JSON", true},
		{"response against its schema", "open", "misshaped", nil, "upstream_error", "open.misshaped: the response does not match its declared schema", true},
		{"text where a schema is declared", "open", "shapedtext", nil, "upstream_error", `declares a response schema but sent "text/plain", not JSON`, true},
		{"over the size limit", "open", "over", nil, "size_limit_exceeded", "the response of open.over is over api.max_response_bytes (64 bytes)", true},
		{"redirects are not followed", "open", "redirect", nil, "upstream_error", "open.redirect answered HTTP 302", true},
		{"provider error", "env", "down", nil, "upstream_error", "env.down answered HTTP 503", true},
		{"nothing listens", "closed", "json", nil, "unavailable", "provider closed is unreachable", false},
		{"a private address", "private", "json", nil, "policy_violation", "provider private resolves to an address that may not be reached", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "credential unset" {
				t.Setenv("CYNODE_API_TEST_SECRET", "")
				tc.typ, tc.says = "unavailable", "environment variable CYNODE_API_TEST_SECRET is unset on the service's host"
			}
			before := e.p.count()
			err := e.d.For(t).Fail(e.call, ct.PMAgent, args(tc.provider, tc.op, tc.params), tc.typ, tc.says)
			if strings.Contains(err.Message, secret) || strings.Contains(fmt.Sprint(err.Details), secret) {
				t.Fatalf("the credential is in the error: %v", err)
			}
			if sent := e.p.count() > before; sent != tc.sent {
				t.Fatalf("the provider was called: %v; want %v", sent, tc.sent)
			}
		})
	}
}

// A provider that does not answer within api.timeout_ms gives
// unavailable naming the limit.
func TestTimeout(t *testing.T) {
	e := startTimeout(t, 50)
	e.d.Fail(e.call, ct.PMAgent, args("open", "hang", nil), "unavailable", "provider open took longer than api.timeout_ms (50 ms)")
}

func TestNew(t *testing.T) {
	ops := map[string]gateway.APIOperation{"get": op("GET", "/x", anyParams)}
	for _, tc := range []struct {
		name string
		p    gateway.APIProvider
		says string
	}{
		{"bad params schema", gateway.APIProvider{BaseURL: "https://a.example", Operations: map[string]gateway.APIOperation{"get": op("GET", "/x", `{"type":12}`)}}, "api.providers.p.operations.get.params_schema"},
		{"params schema not JSON", gateway.APIProvider{BaseURL: "https://a.example", Operations: map[string]gateway.APIOperation{"get": op("GET", "/x", `{`)}}, "params_schema"},
		{"bad response schema", gateway.APIProvider{BaseURL: "https://a.example", Operations: map[string]gateway.APIOperation{"get": {Method: "GET", Path: "/x", ParamsSchema: json.RawMessage(anyParams), ResponseSchema: json.RawMessage(`{"required":"x"}`)}}}, "api.providers.p.operations.get.response_schema"},
		{"bad base URL", gateway.APIProvider{BaseURL: "ftp://a.example", Operations: ops}, "api.providers.p.base_url"},
		{"no operations", gateway.APIProvider{BaseURL: "https://a.example"}, "api.providers.p.operations is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := api.New(gateway.APIConfig{Providers: map[string]gateway.APIProvider{"p": tc.p}}, t.TempDir(), nil)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("New: %v; want an error naming %s", err, tc.says)
			}
		})
	}
	if _, err := api.New(gateway.APIConfig{}, t.TempDir(), nil); err != nil {
		t.Fatalf("an empty configuration: %v", err)
	}
	// Without a service, the tool answers unavailable.
	d := ct.NewDirect(t, nil)
	d.Fail(d.Spec(api.Specs(nil), api.ToolCall), ct.PMAgent, args("p", "o", nil), "unavailable", "api.call is not configured in this process")
}

// Calls from many goroutines share one service.
func TestConcurrentCalls(t *testing.T) {
	e := start(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := e.d.Run(e.call, ct.SandboxAgent, args("env", "search", map[string]any{"i": i}))
			if err != nil {
				errs <- err
				return
			}
			if ct.Get(v, "http_status") != float64(200) {
				errs <- fmt.Errorf("call %d: %v", i, v)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := e.p.count(); n != 16 {
		t.Fatalf("the provider saw %d calls; want 16", n)
	}
}
