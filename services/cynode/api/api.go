// Package api is the CyNodeAI api.call tool: calls to operator-declared
// providers and operations only (cynode.json "api"). The service resolves
// the provider's credential (an environment variable or a file) and adds
// it to the request; the credential never appears in a result, an error
// message, a log line or an audit record. params are checked against the
// operation's JSON Schema before anything is sent; the response is
// size-limited (api.max_response_bytes), must satisfy the operation's
// response schema when one is declared, loses every header but a short
// allowlist (so Set-Cookie, Authorization, WWW-Authenticate and any
// token/key/secret header never reach the agent), and has the credential
// redacted from its body should the provider echo it. Requests go through
// internal/egress (public addresses only, no proxy, no redirects
// followed). api.call is task-scoped with scope both.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/services/cynode/internal/egress"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
)

// ToolCall is the tool's name.
const ToolCall = "api.call"

var callParams = `{"type":"object","additionalProperties":false,"required":["task_id","provider","operation","params"],"properties":{
	"task_id":` + gateway.IDSchema + `,"provider":{"type":"string","minLength":1,"maxLength":64},"operation":{"type":"string","minLength":1,"maxLength":64},
	"params":{"type":"object"},` + gateway.ContextSchema + `}}`

// Redacted replaces the credential wherever a provider echoes it.
const Redacted = "[redacted]"

// keptHeaders are the only response headers returned.
// (Content-Length is not among them: redaction may change the length.)
var keptHeaders = []string{"Content-Type", "Content-Language", "Etag", "Last-Modified", "Cache-Control",
	"Retry-After", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "X-Request-Id"}

type operation struct {
	gateway.APIOperation
	params, response *registry.Schema
}

type provider struct {
	gateway.APIProvider
	ops map[string]*operation
}

// Service holds the declared providers.
type Service struct {
	cfg       gateway.APIConfig
	providers map[string]*provider
	client    *http.Client
	dataDir   string
}

// New compiles the providers' schemas; hooks is nil outside tests.
func New(cfg gateway.APIConfig, dataDir string, hooks *egress.Hooks) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	s := &Service{cfg: cfg, providers: map[string]*provider{}, dataDir: dataDir,
		client: egress.NewDialer(hooks).Client(time.Duration(cfg.TimeoutMS) * time.Millisecond)}
	for pn, p := range cfg.Providers {
		pv := &provider{APIProvider: p, ops: map[string]*operation{}}
		for on, o := range p.Operations {
			op := &operation{APIOperation: o}
			var err error
			if op.params, err = registry.CompileSchema(o.ParamsSchema); err != nil {
				return nil, fmt.Errorf("cynode config: api.providers.%s.operations.%s.params_schema: %w", pn, on, err)
			}
			if len(o.ResponseSchema) > 0 {
				if op.response, err = registry.CompileSchema(o.ResponseSchema); err != nil {
					return nil, fmt.Errorf("cynode config: api.providers.%s.operations.%s.response_schema: %w", pn, on, err)
				}
			}
			pv.ops[on] = op
		}
		s.providers[pn] = pv
	}
	return s, nil
}

// Specs are the api tool; s nil gives the definition only (for help).
func Specs(s *Service) []gateway.Spec {
	return []gateway.Spec{{Name: ToolCall,
		Description: "Calls an operation of an operator-declared API provider with params checked against its schema; returns http_status, a few safe headers and the (schema-checked, size-limited) body. Credentials are added by the service and never returned.",
		Params:      callParams, Scope: gateway.ScopeBoth, TaskScoped: true,
		Run: func(ctx context.Context, x *gateway.Exec) (any, error) {
			if s == nil {
				return nil, gateway.Errorf(gateway.TypeUnavailable, "api.call is not configured in this process")
			}
			return s.call(ctx, x)
		}}}
}

func names[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// secret reads the provider's credential.
func (s *Service) secret(pn string, c *gateway.APICredential) (string, error) {
	var v string
	if c.Env != "" {
		v = os.Getenv(c.Env)
		if v == "" {
			return "", gateway.Errorf(gateway.TypeUnavailable, "the credential of provider %s is not available: environment variable %s is unset on the service's host (the operator sets it)", pn, c.Env)
		}
	} else {
		path := c.File
		if !filepath.IsAbs(path) {
			path = filepath.Join(s.dataDir, path)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return "", gateway.Errorf(gateway.TypeUnavailable, "the credential of provider %s is not available: its file (api.providers.%s.credential.file) cannot be read", pn, pn)
		}
		v = strings.TrimSpace(string(raw))
		if v == "" {
			return "", gateway.Errorf(gateway.TypeUnavailable, "the credential of provider %s is not available: its file (api.providers.%s.credential.file) is empty", pn, pn)
		}
	}
	return v, nil
}

func (s *Service) call(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		Provider  string          `json:"provider"`
		Operation string          `json:"operation"`
		Params    json.RawMessage `json:"params"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	p, ok := s.providers[a.Provider]
	if !ok || !slices.Contains(p.Projects, x.Project) {
		// Providers of other projects are answered like missing ones.
		var mine []string
		for _, n := range names(s.providers) {
			if slices.Contains(s.providers[n].Projects, x.Project) {
				mine = append(mine, n)
			}
		}
		return nil, gateway.Errorf(gateway.TypeNotFound, "provider %q is not declared for project %s (declared: %v); the operator declares providers under api.providers in cynode.json", a.Provider, x.Project, mine)
	}
	op, ok := p.ops[a.Operation]
	if !ok {
		return nil, gateway.Errorf(gateway.TypeNotFound, "provider %s has no operation %q (operations: %v)", a.Provider, a.Operation, names(p.ops))
	}
	if err := op.params.Validate(a.Params); err != nil {
		msg := strings.Replace(strings.TrimPrefix(err.Error(), registry.ErrArgs.Error()+": "), "arguments", "params", 1)
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "%s.%s: %s", a.Provider, a.Operation, msg)
	}
	// Numbers keep the text they were sent as: a float64 would send
	// 1000000 as 1e+06 and round integers past 2^53.
	var params map[string]any
	dec := json.NewDecoder(bytes.NewReader(a.Params))
	dec.UseNumber()
	if err := dec.Decode(&params); err != nil {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "params: %v", err)
	}
	req, err := s.request(ctx, p, op, params)
	if err != nil {
		return nil, err
	}
	var secret string
	if c := p.Credential; c != nil {
		if secret, err = s.secret(a.Provider, c); err != nil {
			return nil, err
		}
		req.Header.Set(c.Header, c.Prefix+secret)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, s.netErr(ctx, a.Provider, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(s.cfg.MaxResponseBytes)+1))
	if err != nil {
		return nil, s.netErr(ctx, a.Provider, err)
	}
	if len(body) > s.cfg.MaxResponseBytes {
		return nil, gateway.Errorf(gateway.TypeSizeLimit, "the response of %s.%s is over api.max_response_bytes (%d bytes)", a.Provider, a.Operation, s.cfg.MaxResponseBytes).
			With(map[string]any{"limit": "api.max_response_bytes", "limit_bytes": s.cfg.MaxResponseBytes})
	}
	if secret != "" {
		body = bytes.ReplaceAll(body, []byte(secret), []byte(Redacted))
	}
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return nil, gateway.Errorf(gateway.TypeUpstream, "%s.%s answered HTTP %d", a.Provider, a.Operation, resp.StatusCode).With(map[string]any{"http_status": resp.StatusCode})
	}
	out := map[string]any{"provider": a.Provider, "operation": a.Operation, "http_status": resp.StatusCode, "headers": safeHeaders(resp.Header, p.Credential)}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	isJSON := mt == "application/json" || strings.HasSuffix(mt, "+json")
	switch {
	case isJSON:
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			return nil, gateway.Errorf(gateway.TypeUpstream, "%s.%s sent %s that is not JSON: %v", a.Provider, a.Operation, mt, err)
		}
		if op.response != nil {
			if err := op.response.Validate(body); err != nil {
				msg := strings.Replace(strings.TrimPrefix(err.Error(), registry.ErrArgs.Error()+": "), "arguments", "response", 1)
				return nil, gateway.Errorf(gateway.TypeUpstream, "%s.%s: the response does not match its declared schema: %s", a.Provider, a.Operation, msg)
			}
		}
		out["body"] = v
	case op.response != nil:
		return nil, gateway.Errorf(gateway.TypeUpstream, "%s.%s declares a response schema but sent %q, not JSON", a.Provider, a.Operation, mt)
	case strings.HasPrefix(mt, "text/") || len(body) == 0:
		out["body_text"] = string(bytes.ToValidUTF8(body, []byte("\uFFFD")))
	default:
		return nil, gateway.Errorf(gateway.TypeUpstream, "%s.%s sent %q; api.call returns JSON or text only", a.Provider, a.Operation, mt)
	}
	return out, nil
}

// request builds the HTTP request: placeholders take their params
// (path-escaped), the rest go to the query (GET, DELETE) or a JSON body.
func (s *Service) request(ctx context.Context, p *provider, op *operation, params map[string]any) (*http.Request, error) {
	path := op.Path
	rest := map[string]any{}
	for k, v := range params {
		rest[k] = v
	}
	for _, name := range op.Placeholders() {
		v, ok := params[name]
		if !ok {
			return nil, gateway.Errorf(gateway.TypeInvalidArgument, "params.%s is required (the path %s uses it)", name, op.Path)
		}
		str, ok := scalar(v)
		if !ok {
			return nil, gateway.Errorf(gateway.TypeInvalidArgument, "params.%s goes into the path and must be a string, number or boolean", name)
		}
		if str == "" || str == "." || str == ".." {
			// PathEscape keeps them, and a server resolves them to
			// another endpoint than the operation's.
			return nil, gateway.Errorf(gateway.TypeInvalidArgument, "params.%s goes into the path and may not be empty, \".\" or \"..\" (the path would name another endpoint than %s)", name, op.Path)
		}
		path = strings.ReplaceAll(path, "{"+name+"}", url.PathEscape(str))
		delete(rest, name)
	}
	target := strings.TrimSuffix(p.BaseURL, "/") + path
	var body io.Reader
	if op.Method == http.MethodGet || op.Method == http.MethodDelete {
		q := url.Values{}
		for _, k := range names(rest) {
			switch v := rest[k].(type) {
			case []any:
				for _, e := range v {
					str, ok := scalar(e)
					if !ok {
						return nil, gateway.Errorf(gateway.TypeInvalidArgument, "params.%s goes into the query and must hold strings, numbers or booleans", k)
					}
					q.Add(k, str)
				}
			default:
				str, ok := scalar(v)
				if !ok {
					return nil, gateway.Errorf(gateway.TypeInvalidArgument, "params.%s goes into the query and must be a string, number, boolean or a list of them", k)
				}
				q.Set(k, str)
			}
		}
		if len(q) > 0 {
			target += "?" + q.Encode()
		}
	} else {
		raw, err := json.Marshal(rest)
		if err != nil {
			return nil, gateway.Errorf(gateway.TypeInvalidArgument, "params: %v", err)
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, op.Method, target, body)
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "utpmesh-cynode/1.0")
	return req, nil
}

func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		return fmt.Sprint(x), true
	}
	return "", false
}

// safeHeaders keeps the allowlisted response headers; the credential's
// own header is dropped even if it were allowlisted.
func safeHeaders(h http.Header, c *gateway.APICredential) map[string]string {
	out := map[string]string{}
	for _, k := range keptHeaders {
		if c != nil && strings.EqualFold(k, c.Header) {
			continue
		}
		if v := h.Get(k); v != "" {
			out[strings.ToLower(k)] = v
		}
	}
	return out
}

func (s *Service) netErr(ctx context.Context, pn string, err error) error {
	if errors.Is(err, egress.ErrForbiddenAddress) {
		return gateway.Errorf(gateway.TypePolicyViolation, "provider %s resolves to an address that may not be reached (%v); the operator declares public API endpoints", pn, errors.Unwrap(err)).
			With(map[string]any{"limit": "egress address check"})
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return gateway.Errorf(gateway.TypeUnavailable, "provider %s took longer than api.timeout_ms (%d ms)", pn, s.cfg.TimeoutMS).With(map[string]any{"limit": "api.timeout_ms"})
	}
	// The URL in a transport error holds no secret (credentials go in a
	// header), but only the provider is named.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return gateway.Errorf(gateway.TypeUnavailable, "provider %s is unreachable: %v", pn, err)
}
