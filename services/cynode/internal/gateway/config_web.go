package gateway

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// WebConfig configures web.fetch and web.search (cynode.json "web").
// Zero fields take the defaults (DefaultWeb).
type WebConfig struct {
	// Projects are the per-project policies; a project without one may
	// fetch nothing.
	Projects map[string]WebPolicy `json:"projects,omitempty"`
	// MaxRedirects bounds the redirects of one fetch (at most 5).
	MaxRedirects int `json:"max_redirects,omitempty"`
	// MaxBodyBytes bounds a response body before sanitizing.
	MaxBodyBytes int `json:"max_body_bytes,omitempty"`
	// TimeoutMS bounds a whole call (robots.txt, redirects, body).
	TimeoutMS int `json:"timeout_ms,omitempty"`
	// MaxChars bounds the sanitized text (a call may ask for less).
	MaxChars int `json:"max_chars,omitempty"`
	// IgnoreRobots turns robots.txt off (it is respected by default).
	IgnoreRobots bool `json:"ignore_robots,omitempty"`
	// UserAgent is sent, and its first word is the robots.txt product
	// token.
	UserAgent string `json:"user_agent,omitempty"`
	// InjectionDenylist are case-insensitive Go regular expressions; a
	// line of fetched text matching one is dropped. Absent: the built-in
	// list (web.DefaultDenylist); [] : none.
	InjectionDenylist *[]string `json:"injection_denylist,omitempty"`
	// Search is the search provider; absent: web.search is unavailable.
	Search *SearchConfig `json:"search,omitempty"`
}

// WebPolicy is one project's fetch policy.
type WebPolicy struct {
	// Schemes allowed (http, https); default https.
	Schemes []string `json:"schemes,omitempty"`
	// Domains allowed: "example.org" (that host), "*.example.org" (its
	// subdomains), "*" (any host; the address checks still apply).
	Domains []string `json:"domains"`
	// Ports allowed; default 80 and 443.
	Ports []int `json:"ports,omitempty"`
}

// SearchConfig is a SearXNG-compatible JSON search endpoint.
type SearchConfig struct {
	// URL is the search endpoint, e.g. http://127.0.0.1:8888/search; the
	// service adds q, format=json, pageno and safesearch.
	URL string `json:"url"`
	// MaxResults bounds the results of one call (default 10).
	MaxResults int `json:"max_results,omitempty"`
}

// DefaultWeb are the web limits when the configuration sets none.
var DefaultWeb = WebConfig{MaxRedirects: 5, MaxBodyBytes: 2 << 20, TimeoutMS: 15000, MaxChars: 20000, UserAgent: "utpmesh-cynode/1.0"}

// MaxRedirectsCap is the most redirects a configuration may allow.
const MaxRedirectsCap = 5

// WithDefaults fills zero fields from DefaultWeb.
func (w WebConfig) WithDefaults() WebConfig {
	d := DefaultWeb
	if w.MaxRedirects > 0 {
		d.MaxRedirects = w.MaxRedirects
	}
	if w.MaxBodyBytes > 0 {
		d.MaxBodyBytes = w.MaxBodyBytes
	}
	if w.TimeoutMS > 0 {
		d.TimeoutMS = w.TimeoutMS
	}
	if w.MaxChars > 0 {
		d.MaxChars = w.MaxChars
	}
	if w.UserAgent != "" {
		d.UserAgent = w.UserAgent
	}
	d.Projects, d.IgnoreRobots, d.InjectionDenylist, d.Search = w.Projects, w.IgnoreRobots, w.InjectionDenylist, w.Search
	if d.Search != nil && d.Search.MaxResults == 0 {
		s := *d.Search
		s.MaxResults = 10
		d.Search = &s
	}
	return d
}

// Validate checks the web configuration and says what to fix.
func (w WebConfig) Validate() error {
	if w.MaxRedirects < 0 || w.MaxRedirects > MaxRedirectsCap {
		return fmt.Errorf("cynode config: web.max_redirects is %d; use 1..%d", w.MaxRedirects, MaxRedirectsCap)
	}
	if w.MaxBodyBytes < 0 || w.TimeoutMS < 0 || w.MaxChars < 0 {
		return fmt.Errorf("cynode config: web.max_body_bytes, web.timeout_ms and web.max_chars must be positive (or left out for the defaults)")
	}
	ids := make([]string, 0, len(w.Projects))
	for id := range w.Projects {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		p := w.Projects[id]
		for _, s := range p.Schemes {
			if s != "http" && s != "https" {
				return fmt.Errorf("cynode config: web.projects.%s.schemes has %q; use http or https", id, s)
			}
		}
		if len(p.Domains) == 0 {
			return fmt.Errorf("cynode config: web.projects.%s.domains is empty; list hosts such as \"example.org\" or \"*.example.org\"", id)
		}
		for _, d := range p.Domains {
			host := strings.TrimPrefix(d, "*.")
			if d == "*" {
				continue
			}
			if host == "" || strings.ContainsAny(host, "*/:@ ") || host != strings.ToLower(host) {
				return fmt.Errorf("cynode config: web.projects.%s.domains has %q; use a lower-case host (\"example.org\"), \"*.example.org\" or \"*\"", id, d)
			}
		}
		for _, port := range p.Ports {
			if port < 1 || port > 65535 {
				return fmt.Errorf("cynode config: web.projects.%s.ports has %d; use 1..65535", id, port)
			}
		}
	}
	if w.Search != nil {
		u, err := url.Parse(w.Search.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("cynode config: web.search.url %q is not an http(s) URL; use e.g. \"http://127.0.0.1:8888/search\"", w.Search.URL)
		}
		if w.Search.MaxResults < 0 || w.Search.MaxResults > 100 {
			return fmt.Errorf("cynode config: web.search.max_results is %d; use 1..100", w.Search.MaxResults)
		}
	}
	return nil
}
