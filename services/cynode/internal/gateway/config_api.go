package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// APIConfig declares the providers api.call may reach (cynode.json
// "api"). Nothing else is reachable.
type APIConfig struct {
	Providers map[string]APIProvider `json:"providers,omitempty"`
	// MaxResponseBytes bounds a provider's response body (default 256 KiB).
	MaxResponseBytes int `json:"max_response_bytes,omitempty"`
	// TimeoutMS bounds one call (default 15000).
	TimeoutMS int `json:"timeout_ms,omitempty"`
}

// APIProvider is one operator-declared API.
type APIProvider struct {
	// BaseURL is the API's root, e.g. https://api.example.com/v1.
	BaseURL string `json:"base_url"`
	// Projects may call the provider (none: no project may).
	Projects []string `json:"projects"`
	// Credential is added to every request; its value never leaves the
	// service.
	Credential *APICredential `json:"credential,omitempty"`
	// Operations are the only calls allowed.
	Operations map[string]APIOperation `json:"operations"`
}

// APICredential names where the secret is and how it is sent.
type APICredential struct {
	// Header carries the secret, e.g. Authorization or X-Api-Key.
	Header string `json:"header"`
	// Prefix precedes the secret in the header, e.g. "Bearer ".
	Prefix string `json:"prefix,omitempty"`
	// Env is the environment variable holding the secret; File (relative
	// to the data directory, or absolute) is the alternative.
	Env  string `json:"env,omitempty"`
	File string `json:"file,omitempty"`
}

// APIOperation is one allowed call of a provider.
type APIOperation struct {
	// Method is GET, POST, PUT, PATCH or DELETE.
	Method string `json:"method"`
	// Path is appended to the base URL; {name} placeholders take the
	// param of that name (path-escaped).
	Path string `json:"path"`
	// ParamsSchema is the JSON Schema of params (required).
	ParamsSchema json.RawMessage `json:"params_schema"`
	// ResponseSchema, when set, the JSON response must satisfy.
	ResponseSchema json.RawMessage `json:"response_schema,omitempty"`
}

// DefaultAPI are the api.call limits when the configuration sets none.
var DefaultAPI = APIConfig{MaxResponseBytes: 256 << 10, TimeoutMS: 15000}

// WithDefaults fills zero limits from DefaultAPI.
func (a APIConfig) WithDefaults() APIConfig {
	if a.MaxResponseBytes <= 0 {
		a.MaxResponseBytes = DefaultAPI.MaxResponseBytes
	}
	if a.TimeoutMS <= 0 {
		a.TimeoutMS = DefaultAPI.TimeoutMS
	}
	return a
}

var (
	apiName     = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)
	placeholder = regexp.MustCompile(`\{([A-Za-z0-9_]+)\}`)
	apiMethods  = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
)

// Placeholders are the {name} parameters of an operation path.
func (o APIOperation) Placeholders() []string {
	var out []string
	for _, m := range placeholder.FindAllStringSubmatch(o.Path, -1) {
		out = append(out, m[1])
	}
	return out
}

// Validate checks the API configuration and says what to fix (schemas are
// compiled by the api package when the service starts).
func (a APIConfig) Validate() error {
	names := make([]string, 0, len(a.Providers))
	for n := range a.Providers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := a.Providers[n]
		at := "cynode config: api.providers." + n
		if !apiName.MatchString(n) {
			return fmt.Errorf("%s: the name must be lower-case letters, digits, '_', '.', '-'", at)
		}
		u, err := url.Parse(p.BaseURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" {
			return fmt.Errorf("%s.base_url %q: use an http(s) URL without user information or query, e.g. https://api.example.com/v1", at, p.BaseURL)
		}
		if c := p.Credential; c != nil {
			if c.Header == "" || (c.Env == "") == (c.File == "") {
				return fmt.Errorf("%s.credential: set header and exactly one of env or file", at)
			}
		}
		if len(p.Operations) == 0 {
			return fmt.Errorf("%s.operations is empty; declare the operations agents may call", at)
		}
		for on, o := range p.Operations {
			oat := at + ".operations." + on
			if !apiName.MatchString(on) {
				return fmt.Errorf("%s: the name must be lower-case letters, digits, '_', '.', '-'", oat)
			}
			if !slices.Contains(apiMethods, o.Method) {
				return fmt.Errorf("%s.method %q: use one of %v", oat, o.Method, apiMethods)
			}
			if !strings.HasPrefix(o.Path, "/") || strings.Contains(o.Path, "..") || strings.ContainsAny(o.Path, "?#") {
				return fmt.Errorf("%s.path %q: use an absolute path without '..', '?' or '#', e.g. /forecast/{city}", oat, o.Path)
			}
			if len(o.ParamsSchema) == 0 {
				return fmt.Errorf("%s.params_schema is missing; declare the JSON Schema of params", oat)
			}
		}
	}
	return nil
}
