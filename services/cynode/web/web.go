// Package web is the CyNodeAI web tools: web.fetch (a policy-controlled,
// sanitized fetch) and web.search (a SearXNG-compatible search provider,
// its results sanitized the same way). Both are task-scoped with scope
// both.
//
// web.fetch follows the project's policy (cynode.json web.projects.<id>:
// schemes, domains, ports), at most web.max_redirects (≤ 5) redirects,
// each hop checked again, robots.txt (RFC 9309) respected unless
// web.ignore_robots, a body limit and a time limit for the whole call. It
// reaches the network only through internal/egress, which refuses
// loopback, private, link-local (metadata), reserved and multicast
// addresses after DNS resolution and dials the address it checked. The
// body goes through Sanitizer: the HTML5 parser of golang.org/x/net/html,
// only visible content text kept, whitespace normalized, invisible
// characters and prompt-injection lines (web.injection_denylist) dropped,
// max_chars with a truncation marker.
package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/html/charset"

	"github.com/utpmesh/utpmesh/services/cynode/internal/egress"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
)

// Tool names.
const (
	ToolFetch  = "web.fetch"
	ToolSearch = "web.search"
)

var (
	fetchParams = `{"type":"object","additionalProperties":false,"required":["task_id","url"],"properties":{
	"task_id":` + gateway.IDSchema + `,"url":{"type":"string","minLength":1,"maxLength":4096},"max_chars":{"type":"integer","minimum":1},` + gateway.ContextSchema + `}}`
	searchParams = `{"type":"object","additionalProperties":false,"required":["task_id","query"],"properties":{
	"task_id":` + gateway.IDSchema + `,"query":{"type":"string","minLength":1,"maxLength":1000},"limit":{"type":"integer","minimum":1},"safe_filter":{"type":"boolean"},` + gateway.ContextSchema + `}}`
)

// Service holds the web configuration and the egress client.
type Service struct {
	cfg      gateway.WebConfig
	san      *Sanitizer
	dialer   *egress.Dialer
	client   *http.Client
	provider *http.Client
	timeout  time.Duration
}

// New builds the web tools' service from the configuration; hooks is nil
// outside tests.
func New(cfg gateway.WebConfig, hooks *egress.Hooks) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	var deny []string
	if cfg.InjectionDenylist != nil {
		deny = append([]string{}, *cfg.InjectionDenylist...)
	}
	san, err := NewSanitizer(deny)
	if err != nil {
		return nil, fmt.Errorf("cynode config: %w", err)
	}
	timeout := time.Duration(cfg.TimeoutMS) * time.Millisecond
	d := egress.NewDialer(hooks)
	provider := &http.Client{Timeout: timeout, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true, ResponseHeaderTimeout: timeout},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &Service{cfg: cfg, san: san, dialer: d, client: d.Client(timeout), provider: provider, timeout: timeout}, nil
}

// Specs are the web tools; s nil gives the definitions only (for help).
func Specs(s *Service) []gateway.Spec {
	run := func(f func(*Service, context.Context, *gateway.Exec) (any, error)) func(context.Context, *gateway.Exec) (any, error) {
		return func(ctx context.Context, x *gateway.Exec) (any, error) {
			if s == nil {
				return nil, gateway.Errorf(gateway.TypeUnavailable, "the web tools are not configured in this process")
			}
			return f(s, ctx, x)
		}
	}
	return []gateway.Spec{
		{Name: ToolFetch, Description: "Fetches an http(s) URL allowed by the project's web policy (SSRF-safe, robots.txt respected, at most 5 redirects) and returns its sanitized visible text with final_url, fetched_at, content_type and title.",
			Params: fetchParams, Scope: gateway.ScopeBoth, TaskScoped: true, Run: run((*Service).fetch)},
		{Name: ToolSearch, Description: "Searches the web through the configured search provider; returns sanitized titles, snippets and URLs (fetchable says whether web.fetch's policy admits the URL).",
			Params: searchParams, Scope: gateway.ScopeBoth, TaskScoped: true, Run: run((*Service).search)},
	}
}

func policyErr(format string, a ...any) *gateway.Error {
	return gateway.Errorf(gateway.TypePolicyViolation, format, a...)
}

func (s *Service) policy(project string) (gateway.WebPolicy, error) {
	p, ok := s.cfg.Projects[project]
	if !ok {
		return p, policyErr("project %s has no web policy, so it may fetch nothing: the operator adds web.projects.%s {\"domains\":[…]} to cynode.json, or under cynode.web in the --config file", project, project)
	}
	if len(p.Schemes) == 0 {
		p.Schemes = []string{"https"}
	}
	if len(p.Ports) == 0 {
		p.Ports = []int{80, 443}
	}
	return p, nil
}

func domainAllowed(domains []string, host string) bool {
	for _, d := range domains {
		if d == "*" || d == host {
			return true
		}
		if suffix, ok := strings.CutPrefix(d, "*"); ok && strings.HasSuffix(host, suffix) && len(host) > len(suffix) {
			return true
		}
	}
	return false
}

// checkURL applies the project's policy to one URL (the first or a
// redirect target).
func checkURL(p gateway.WebPolicy, u *url.URL) error {
	if !slices.Contains(p.Schemes, u.Scheme) {
		return policyErr("URL %s: scheme %q is not allowed for this project (allowed: %v)", u.Redacted(), u.Scheme, p.Schemes)
	}
	if u.User != nil {
		return policyErr("URL %s carries user information (user:password@); pass the URL without it", u.Redacted())
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return policyErr("URL %s has no host; pass an absolute URL such as https://example.org/page", u.Redacted())
	}
	if !domainAllowed(p.Domains, host) {
		return policyErr("URL %s: host %s is not on this project's domain allowlist (%v); ask the operator to add it to web.projects.<project>.domains", u.Redacted(), host, p.Domains)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	n, err := strconv.Atoi(port)
	if err != nil || !slices.Contains(p.Ports, n) {
		return policyErr("URL %s: port %s is not allowed for this project (allowed: %v)", u.Redacted(), port, p.Ports)
	}
	return nil
}

func parseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "url %q is not an absolute http(s) URL; pass e.g. https://example.org/page", raw)
	}
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}

type response struct {
	url         *url.URL
	status      int
	contentType string
	body        []byte
}

// get makes one request without following redirects; the body is read up
// to limit bytes (more is an error).
func (s *Service) get(ctx context.Context, u *url.URL, limit int) (*response, *http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, gateway.Errorf(gateway.TypeInvalidArgument, "url %s: %v", u.Redacted(), err)
	}
	req.Header.Set("User-Agent", s.cfg.UserAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.1")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, nil, s.netErr(ctx, u, err)
	}
	defer resp.Body.Close()
	out := &response{url: u, status: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return out, resp, nil
	}
	if resp.ContentLength > int64(limit) {
		return nil, nil, tooBig(u, resp.ContentLength, limit)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		return nil, nil, s.netErr(ctx, u, err)
	}
	if len(body) > limit {
		return nil, nil, tooBig(u, -1, limit)
	}
	out.body = body
	return out, resp, nil
}

func tooBig(u *url.URL, size int64, limit int) error {
	what := "more than"
	if size >= 0 {
		what = fmt.Sprintf("%d bytes,", size)
	}
	return gateway.Errorf(gateway.TypeSizeLimit, "the response of %s is %s over the body limit of %d bytes (web.max_body_bytes); fetch a smaller page", u.Redacted(), what, limit).
		With(map[string]any{"limit": "web.max_body_bytes", "limit_bytes": limit})
}

func (s *Service) netErr(ctx context.Context, u *url.URL, err error) error {
	if errors.Is(err, egress.ErrForbiddenAddress) {
		msg := err.Error()
		if i := strings.Index(msg, "host "); i >= 0 {
			msg = msg[i:]
		}
		return policyErr("refused to connect for %s: %s; only public addresses may be fetched", u.Redacted(), msg).
			With(map[string]any{"limit": addrCheck})
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return gateway.Errorf(gateway.TypeUnavailable, "fetching %s took longer than web.timeout_ms (%d ms)", u.Redacted(), s.cfg.TimeoutMS).
			With(map[string]any{"limit": "web.timeout_ms", "timeout_ms": s.cfg.TimeoutMS})
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return gateway.Errorf(gateway.TypeUnavailable, "host of %s does not resolve: %v", u.Redacted(), dns)
	}
	return gateway.Errorf(gateway.TypeUnavailable, "fetching %s: %v", u.Redacted(), err)
}

// addrCheck names the egress address check in an error's details.
const addrCheck = "egress address check"

// isAddrRefusal reports an error of the egress address check (never
// turned into a robots.txt answer: the address is the reason).
func isAddrRefusal(err error) bool {
	var ge *gateway.Error
	if !errors.As(err, &ge) {
		return false
	}
	d, ok := ge.Details.(map[string]any)
	return ok && d["limit"] == addrCheck
}

// robotsBytes bounds a robots.txt.
const robotsBytes = 512 << 10

// robotsFor fetches and parses the robots.txt of u's origin (once per
// call): 2xx applies its rules, 4xx allows everything, anything else
// (5xx, unreachable, too large, a redirect off the policy) disallows
// everything (RFC 9309 §2.3.1).
func (s *Service) robotsFor(ctx context.Context, p gateway.WebPolicy, u *url.URL, cache map[string]*robots) (*robots, error) {
	origin := u.Scheme + "://" + u.Host
	if r, ok := cache[origin]; ok {
		return r, nil
	}
	ru := &url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/robots.txt"}
	resp, err := s.follow(ctx, p, ru, robotsBytes, nil, nil)
	var r *robots
	switch {
	case err != nil && (ctx.Err() != nil || isAddrRefusal(err)):
		return nil, err
	case err != nil: // unreachable, refused, too large, redirected off the policy
		r = &robots{rules: []robotsRule{{allow: false, pattern: "/"}}}
	case resp.status >= 200 && resp.status < 300:
		r = parseRobots(string(resp.body), strings.Fields(s.cfg.UserAgent + " x")[0])
	case resp.status >= 400 && resp.status < 500:
		r = &robots{}
	default:
		r = &robots{rules: []robotsRule{{allow: false, pattern: "/"}}}
	}
	cache[origin] = r
	return r, nil
}

// follow fetches u, following at most MaxRedirects redirects, checking
// every hop against the policy (and robots.txt when cache is not nil).
func (s *Service) follow(ctx context.Context, p gateway.WebPolicy, u *url.URL, limit int, cache map[string]*robots, hops *[]string) (*response, error) {
	for hop := 0; ; hop++ {
		if err := checkURL(p, u); err != nil {
			return nil, err
		}
		if cache != nil && !s.cfg.IgnoreRobots {
			r, err := s.robotsFor(ctx, p, u, cache)
			if err != nil {
				return nil, err
			}
			if !r.allowed(u.EscapedPath() + queryOf(u)) {
				return nil, policyErr("robots.txt of %s://%s disallows %s for %s; choose another page", u.Scheme, u.Host, u.EscapedPath(), s.cfg.UserAgent).
					With(map[string]any{"limit": "robots.txt"})
			}
		}
		resp, hr, err := s.get(ctx, u, limit)
		if err != nil {
			return nil, err
		}
		if resp.status < 300 || resp.status >= 400 {
			return resp, nil
		}
		loc := hr.Header.Get("Location")
		if loc == "" {
			return nil, gateway.Errorf(gateway.TypeUpstream, "%s answered %d without a Location", u.Redacted(), resp.status)
		}
		if hop >= s.cfg.MaxRedirects {
			return nil, policyErr("%s redirects more than %d times (web.max_redirects); fetch the final URL directly", u.Redacted(), s.cfg.MaxRedirects).
				With(map[string]any{"limit": "web.max_redirects", "max_redirects": s.cfg.MaxRedirects})
		}
		next, err := u.Parse(loc)
		if err != nil {
			return nil, gateway.Errorf(gateway.TypeUpstream, "%s redirects to an invalid Location %q", u.Redacted(), loc)
		}
		next.Fragment, next.RawFragment = "", ""
		if hops != nil {
			*hops = append(*hops, next.Redacted())
		}
		u = next
	}
}

func queryOf(u *url.URL) string {
	if u.RawQuery == "" {
		return ""
	}
	return "?" + u.RawQuery
}

// FetchResult is web.fetch's result.
type FetchResult struct {
	URL          string   `json:"url"`
	FinalURL     string   `json:"final_url"`
	Redirects    []string `json:"redirects"`
	FetchedAt    string   `json:"fetched_at"`
	Status       int      `json:"http_status"`
	ContentType  string   `json:"content_type"`
	Title        string   `json:"title"`
	Text         string   `json:"text"`
	Chars        int      `json:"chars"`
	Truncated    bool     `json:"truncated"`
	RemovedLines int      `json:"removed_lines"`
}

func (s *Service) maxChars(asked int) (int, error) {
	if asked == 0 {
		return s.cfg.MaxChars, nil
	}
	if asked > s.cfg.MaxChars {
		return 0, gateway.Errorf(gateway.TypeInvalidArgument, "max_chars %d is over the limit of %d (web.max_chars); pass 1..%d", asked, s.cfg.MaxChars, s.cfg.MaxChars)
	}
	return asked, nil
}

var textTypes = []string{"text/plain", "text/markdown", "text/csv", "application/json", "text/xml", "application/xml"}

func (s *Service) fetch(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		URL      string `json:"url"`
		MaxChars int    `json:"max_chars"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	maxChars, err := s.maxChars(a.MaxChars)
	if err != nil {
		return nil, err
	}
	p, err := s.policy(x.Project)
	if err != nil {
		return nil, err
	}
	u, err := parseURL(a.URL)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	hops := []string{}
	resp, err := s.follow(ctx, p, u, s.cfg.MaxBodyBytes, map[string]*robots{}, &hops)
	if err != nil {
		return nil, err
	}
	if resp.status < 200 || resp.status >= 300 {
		return nil, gateway.Errorf(gateway.TypeUpstream, "%s answered HTTP %d", resp.url.Redacted(), resp.status).With(map[string]any{"http_status": resp.status})
	}
	ct := resp.contentType
	if ct == "" {
		ct = http.DetectContentType(resp.body)
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeUpstream, "%s sent an unreadable Content-Type %q", resp.url.Redacted(), ct)
	}
	body, err := charset.NewReader(bytes.NewReader(resp.body), ct)
	if err != nil {
		body = bytes.NewReader(resp.body)
	}
	var out Sanitized
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		if out, err = s.san.HTML(body, maxChars); err != nil {
			return nil, gateway.Errorf(gateway.TypeUpstream, "%s: %v", resp.url.Redacted(), err)
		}
	case slices.Contains(textTypes, mt) || strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+xml"):
		raw, err := io.ReadAll(body)
		if err != nil {
			return nil, gateway.Errorf(gateway.TypeUpstream, "%s: %v", resp.url.Redacted(), err)
		}
		out = s.san.Text(string(raw), maxChars)
	default:
		return nil, policyErr("%s is %s; web.fetch returns text only (HTML, plain text, JSON, XML)", resp.url.Redacted(), mt).
			With(map[string]any{"content_type": mt})
	}
	return FetchResult{URL: u.Redacted(), FinalURL: resp.url.Redacted(), Redirects: hops, FetchedAt: x.Now.Format(time.RFC3339),
		Status: resp.status, ContentType: mt, Title: out.Title, Text: out.Text, Chars: out.Chars, Truncated: out.Truncated, RemovedLines: out.RemovedLines}, nil
}

// SearchHit is one sanitized search result.
type SearchHit struct {
	Title   string `json:"title"`
	URL     string `json:"url"`
	Snippet string `json:"snippet"`
	// Fetchable says whether the project's web policy admits the URL
	// (web.fetch may still refuse it after resolving it).
	Fetchable bool `json:"fetchable"`
}

// snippetChars bounds a result's title and snippet.
const snippetChars = 500

func (s *Service) search(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		Query      string `json:"query"`
		Limit      int    `json:"limit"`
		SafeFilter *bool  `json:"safe_filter"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	sc := s.cfg.Search
	if sc == nil {
		return nil, gateway.Errorf(gateway.TypeUnavailable, "no search provider is configured: the operator sets web.search.url in cynode.json (a SearXNG-compatible JSON endpoint)")
	}
	if strings.TrimSpace(a.Query) == "" {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "query is blank; pass the words to search for")
	}
	limit := a.Limit
	if limit == 0 {
		limit = sc.MaxResults
	}
	if limit > sc.MaxResults {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "limit %d is over the provider's limit of %d (web.search.max_results); pass 1..%d", limit, sc.MaxResults, sc.MaxResults)
	}
	u, _ := url.Parse(sc.URL) // validated with the configuration
	q := u.Query()
	q.Set("q", a.Query)
	q.Set("format", "json")
	q.Set("pageno", "1")
	if a.SafeFilter != nil {
		q.Set("safesearch", map[bool]string{true: "2", false: "0"}[*a.SafeFilter])
	}
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeInternal, "search request: %v", err)
	}
	req.Header.Set("User-Agent", s.cfg.UserAgent)
	req.Header.Set("Accept", "application/json")
	resp, err := s.provider.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, gateway.Errorf(gateway.TypeUnavailable, "the search provider took longer than web.timeout_ms (%d ms)", s.cfg.TimeoutMS).With(map[string]any{"limit": "web.timeout_ms"})
		}
		return nil, gateway.Errorf(gateway.TypeUnavailable, "the search provider is unreachable: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, gateway.Errorf(gateway.TypeUpstream, "the search provider answered HTTP %d", resp.StatusCode).With(map[string]any{"http_status": resp.StatusCode})
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, int64(s.cfg.MaxBodyBytes)+1))
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeUnavailable, "reading the search provider's answer: %v", err)
	}
	if len(raw) > s.cfg.MaxBodyBytes {
		return nil, gateway.Errorf(gateway.TypeSizeLimit, "the search provider's answer is over web.max_body_bytes (%d)", s.cfg.MaxBodyBytes).With(map[string]any{"limit": "web.max_body_bytes"})
	}
	var body struct {
		Results []struct {
			Title   any `json:"title"`
			URL     any `json:"url"`
			Content any `json:"content"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, gateway.Errorf(gateway.TypeUpstream, "the search provider's answer is not SearXNG JSON ({\"results\":[{\"title\",\"url\",\"content\"}]}): %v", err)
	}
	p, perr := s.policy(x.Project)
	hits := []SearchHit{}
	dropped, removed := 0, 0
	for _, r := range body.Results {
		if len(hits) == limit {
			break
		}
		rawURL, _ := r.URL.(string)
		ru, err := url.Parse(rawURL)
		if err != nil || (ru.Scheme != "http" && ru.Scheme != "https") || ru.Host == "" || ru.User != nil {
			dropped++
			continue
		}
		title, _ := r.Title.(string)
		content, _ := r.Content.(string)
		t, n1 := s.san.Snippet(title, snippetChars)
		sn, n2 := s.san.Snippet(content, snippetChars)
		removed += n1 + n2
		hits = append(hits, SearchHit{Title: t, URL: ru.String(), Snippet: sn, Fetchable: perr == nil && checkURL(p, ru) == nil})
	}
	return map[string]any{"query": a.Query, "results": hits, "dropped_results": dropped, "removed_lines": removed, "fetched_at": x.Now.Format(time.RFC3339)}, nil
}
