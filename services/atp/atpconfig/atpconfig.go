// Package atpconfig is the "atp" section of the configuration file
// (utpmesh up/worker --config FILE): ATP's outside world, which could
// only be set in Go before. notify gives atp_notify_traveller its
// providers (EMAIL through SMTP, SMS and WHATSAPP through webhooks),
// octo the OCTO suppliers atp_search_activities bridges, limits the
// per-client rate limits. Section is what cmd/utpmesh/catalogues.go
// registers with pkg/config; Apply hands the parsed section to the
// service's Deps.
package atpconfig

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/mail"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/pkg/config"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/notify"
	"github.com/utpmesh/utpmesh/services/atp/octo"
	"github.com/utpmesh/utpmesh/services/atp/ratelimit"
)

// Name is the section's top-level key.
const Name = "atp"

// Config is the atp section.
type Config struct {
	// Notify are atp_notify_traveller's providers; a channel left out
	// fails its calls with upstream_unavailable naming what to set.
	Notify Notify `json:"notify,omitempty"`
	// OCTO are the suppliers atp_search_activities bridges.
	OCTO OCTO `json:"octo,omitempty"`
	// Limits are the per-client rate limits.
	Limits Limits `json:"limits,omitempty"`
}

// Notify configures the delivery channels.
type Notify struct {
	// SMTP delivers EMAIL.
	SMTP *SMTP `json:"smtp,omitempty"`
	// SMS and WhatsApp are webhook providers.
	SMS      *Webhook `json:"sms,omitempty"`
	WhatsApp *Webhook `json:"whatsapp,omitempty"`
}

// SMTP is an SMTP server (STARTTLS when it offers it; the password is
// sent only over TLS or to localhost).
type SMTP struct {
	Host string `json:"host" config:"required"`
	Port int    `json:"port" config:"required"`
	// From is the sender address.
	From     string `json:"from" config:"required"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty" config:"secret"`
	// Timeout bounds one delivery; default 10s.
	Timeout time.Duration `json:"timeout,omitempty"`
	// CAFile is a PEM file of the CA certificates that verify the
	// server's STARTTLS certificate (a private CA); left out: the
	// system's roots.
	CAFile string `json:"ca_file,omitempty"`
}

// rootCAs reads CAFile (nil for none).
func (s SMTP) rootCAs() (*x509.CertPool, error) {
	if s.CAFile == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(s.CAFile)
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		return nil, fmt.Errorf("%s holds no PEM certificate; give the CA's certificate (-----BEGIN CERTIFICATE-----)", s.CAFile)
	}
	return pool, nil
}

// Validate implements config.Validator.
func (s SMTP) Validate() error {
	if s.Host == "" || strings.ContainsAny(s.Host, " /:@") && net.ParseIP(s.Host) == nil {
		return config.Fieldf("host", "%q is not a host name; write e.g. smtp.example.org (the port goes under port)", s.Host)
	}
	if s.Port < 1 || s.Port > 65535 {
		return config.Fieldf("port", "%d is not a port; use 1..65535 (587 for submission with STARTTLS, 25 for relay)", s.Port)
	}
	if a, err := mail.ParseAddress(s.From); err != nil || a.Name != "" {
		return config.Fieldf("from", "%q is not a plain address; write e.g. atp@example.org", s.From)
	}
	if (s.Username == "") != (s.Password == "") {
		return config.Fieldf("password", "username and password go together: set both for AUTH PLAIN, or neither")
	}
	if _, err := s.rootCAs(); err != nil {
		return config.Fieldf("ca_file", "%v", err)
	}
	return nil
}

// Addr is host:port.
func (s SMTP) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// Webhook is a provider that takes a JSON POST per message.
type Webhook struct {
	// URL is https, or http to a loopback address; it may be ${ENV}.
	URL string `json:"url" config:"required,secret"`
	// Token is sent as "Authorization: Bearer <token>".
	Token string `json:"token,omitempty" config:"secret"`
	// Secret signs each body (header X-Utpmesh-Signature: sha256=<hex
	// HMAC-SHA256>).
	Secret string `json:"secret,omitempty" config:"secret"`
	// Headers are added to each request; values may be ${ENV}.
	Headers map[string]string `json:"headers,omitempty" config:"secret"`
	// Timeout bounds one delivery; default 10s.
	Timeout time.Duration `json:"timeout,omitempty"`
}

var headerName = regexp.MustCompile(`^[A-Za-z0-9-]+$`)

// reservedHeaders are set by the adapter itself.
var reservedHeaders = []string{"Content-Type", "Content-Length", "Host", "Idempotency-Key", "Authorization", notify.SignatureHeader}

// Validate implements config.Validator.
func (w Webhook) Validate() error {
	if err := checkURL(w.URL); err != nil {
		return config.Fieldf("url", "%v", err)
	}
	for k := range w.Headers {
		if !headerName.MatchString(k) {
			return config.Fieldf("headers", "%q is not a header name; use letters, digits and -", k)
		}
		for _, r := range reservedHeaders {
			if http.CanonicalHeaderKey(k) == r {
				return config.Fieldf("headers", "%s is set by the service; use token: for Authorization, secret: for the signature", r)
			}
		}
	}
	return nil
}

// checkURL accepts https URLs, and http ones to loopback hosts (tests,
// a relay on the same machine); it never repeats the URL, which may hold
// a key.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("is not an http(s) URL; write e.g. https://provider.example/v1/send")
	}
	if u.User != nil {
		return fmt.Errorf("%s carries a user name or password; put the credential under token, headers or api_key instead", notify.Redact(raw))
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) {
		return fmt.Errorf("%s is plain http to a host that is not loopback: its credentials would cross the network in clear; use https", notify.Redact(raw))
	}
	return nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// OCTO lists the OCTO suppliers.
type OCTO struct {
	// Timeout is each supplier's default request timeout; default 5s.
	Timeout   time.Duration `json:"timeout,omitempty"`
	Suppliers []Supplier    `json:"suppliers"`
}

// Validate implements config.Validator.
func (o OCTO) Validate() error {
	seen := map[string]bool{}
	for _, s := range o.Suppliers {
		if seen[s.ID] {
			return config.Fieldf("suppliers", "two suppliers have the id %q; give each its own", s.ID)
		}
		seen[s.ID] = true
	}
	return nil
}

// Supplier is one OCTO supplier.
type Supplier struct {
	// ID names the supplier in activity ids (octo:<id>:<product>:<option>)
	// and as their operator_id.
	ID string `json:"id" config:"required"`
	// BaseURL is the OCTO API root (https, or http to loopback).
	BaseURL string `json:"base_url" config:"required"`
	// APIKey is sent as "Authorization: Bearer <key>"; it may be ${ENV}.
	APIKey string `json:"api_key" config:"required,secret"`
	// Products, when set, are the only product ids bridged.
	Products []string `json:"products,omitempty"`
	// Category and Location fill the ATP fields OCTO core lacks.
	Category string `json:"category,omitempty"`
	Location string `json:"location,omitempty"`
	// Timeout bounds each request; default octo.timeout.
	Timeout time.Duration `json:"timeout,omitempty"`
}

var supplierID = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// Validate implements config.Validator.
func (s Supplier) Validate() error {
	if !supplierID.MatchString(s.ID) {
		return config.Fieldf("id", "%q is not a supplier id; use lower-case letters, digits, _ and - (it becomes part of activity ids)", s.ID)
	}
	if err := checkURL(s.BaseURL); err != nil {
		return config.Fieldf("base_url", "%v", err)
	}
	if s.APIKey == "" {
		return config.Fieldf("api_key", "is empty; write the supplier's key, or ${ENV_VAR} to read it from the environment")
	}
	for _, p := range s.Products {
		if p == "" {
			return config.Fieldf("products", "has an empty product id")
		}
	}
	return nil
}

// Limits are the per-client rate limits: the top-level keys apply to
// every project, projects.<id> replaces them for one (0 or left out:
// the default; -1: off).
type Limits struct {
	ratelimit.Limits
	Projects map[string]ratelimit.Limits `json:"projects,omitempty"`
}

// Validate implements config.Validator.
func (l Limits) Validate() error {
	check := func(at string, x ratelimit.Limits) error {
		for _, f := range []struct {
			name string
			v    int
		}{{"calls_per_minute", x.CallsPerMinute}, {"hem_per_hour", x.HEMPerHour}, {"notifications_per_hour", x.NotificationsPerHour}} {
			if f.v < -1 {
				return config.Fieldf(at+f.name, "is %d; use a positive number, 0 for the default or -1 to turn the limit off", f.v)
			}
		}
		return nil
	}
	if err := check("", l.Limits); err != nil {
		return err
	}
	for p, x := range l.Projects {
		if err := check("projects."+p+".", x); err != nil {
			return err
		}
	}
	return nil
}

// Section is the atp section's parser, for config.Load.
func Section() config.Section {
	return config.Section{Name: Name, Parse: func(n *config.Node) (any, error) {
		var c Config
		if err := n.Decode(&c); err != nil {
			return nil, err
		}
		return c, nil
	}}
}

// Notifiers are the configured channels' adapters.
func (c Config) Notifiers() map[string]atp.Notifier {
	out := map[string]atp.Notifier{}
	if s := c.Notify.SMTP; s != nil {
		roots, _ := s.rootCAs() // read and checked by Validate
		out["EMAIL"] = &notify.SMTP{Addr: s.Addr(), From: s.From, Username: s.Username, Password: s.Password, Timeout: s.Timeout, RootCAs: roots}
	}
	for ch, w := range map[string]*Webhook{"SMS": c.Notify.SMS, "WHATSAPP": c.Notify.WhatsApp} {
		if w != nil {
			out[ch] = &notify.Webhook{URL: w.URL, Token: w.Token, Secret: w.Secret, Headers: w.Headers, Timeout: w.Timeout}
		}
	}
	return out
}

// Suppliers are the OCTO suppliers' clients.
func (c Config) Suppliers() []*octo.Supplier {
	var out []*octo.Supplier
	for _, s := range c.OCTO.Suppliers {
		t := s.Timeout
		if t == 0 {
			t = c.OCTO.Timeout
		}
		out = append(out, &octo.Supplier{ID: s.ID, BaseURL: s.BaseURL, APIKey: s.APIKey, ProductIDs: s.Products,
			Category: s.Category, Location: s.Location, Timeout: t})
	}
	return out
}

// RateLimits is the per-project limit function of atp.Deps.
func (c Config) RateLimits() func(project string) ratelimit.Limits {
	return func(project string) ratelimit.Limits {
		if l, ok := c.Limits.Projects[project]; ok {
			return l
		}
		return c.Limits.Limits
	}
}

// From returns the atp section of f, and whether f has one.
func From(f *config.File) (Config, bool) {
	v, ok := f.Section(Name)
	if !ok {
		return Config{}, false
	}
	c, ok := v.(Config)
	return c, ok
}

// Apply sets d's notifiers, OCTO suppliers and rate limits from the atp
// section of f (nothing when f has none), and logs what it set, never a
// secret; a limit turned off is logged as a warning.
func Apply(f *config.File, d *atp.Deps, log *slog.Logger) {
	c, ok := From(f)
	if !ok {
		return
	}
	if log == nil {
		log = slog.Default()
	}
	d.Notifiers = c.Notifiers()
	d.OCTOSuppliers = c.Suppliers()
	d.RateLimits = c.RateLimits()
	var channels []string
	if s := c.Notify.SMTP; s != nil {
		channels = append(channels, "EMAIL=smtp "+s.Addr())
	}
	if w := c.Notify.SMS; w != nil {
		channels = append(channels, "SMS=webhook "+notify.Redact(w.URL))
	}
	if w := c.Notify.WhatsApp; w != nil {
		channels = append(channels, "WHATSAPP=webhook "+notify.Redact(w.URL))
	}
	var suppliers []string
	for _, s := range c.OCTO.Suppliers {
		suppliers = append(suppliers, s.ID+"="+notify.Redact(s.BaseURL))
	}
	log.Info("atp: configured from "+f.Path, "notify", strings.Join(channels, ", "), "octo_suppliers", strings.Join(suppliers, ", "))
	off := func(scope string, l ratelimit.Limits) {
		for name, v := range map[string]int{"calls_per_minute": l.CallsPerMinute, "hem_per_hour": l.HEMPerHour, "notifications_per_hour": l.NotificationsPerHour} {
			if v < 0 {
				log.Warn("atp: a rate limit is off (-1 in the configuration file): clients may call without bound", "limit", name, "scope", scope)
			}
		}
	}
	off("every project", c.Limits.Limits)
	for p, l := range c.Limits.Projects {
		off("project "+p, l)
	}
}
