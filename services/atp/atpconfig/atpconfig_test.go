package atpconfig_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/config"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/atpconfig"
	"github.com/utpmesh/utpmesh/services/atp/internal/atptest"
	"github.com/utpmesh/utpmesh/services/atp/notify"
	"github.com/utpmesh/utpmesh/services/atp/notify/notifytest"
	"github.com/utpmesh/utpmesh/services/atp/octo"
	"github.com/utpmesh/utpmesh/services/atp/octo/octotest"
	"github.com/utpmesh/utpmesh/services/atp/ratelimit"
	"github.com/utpmesh/utpmesh/services/atp/tools"
)

func parse(t *testing.T, yaml string) (*config.File, error) {
	t.Helper()
	return config.Parse("mesh.yaml", []byte(yaml), atpconfig.Section())
}

// TestSectionErrors: every mistake names its line, its key and the fix.
func TestSectionErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown channel", "atp:\n  notify:\n    smpt: {host: x}\n", []string{`mesh.yaml:3: atp.notify: unknown key "smpt"; did you mean "smtp"?`, "keys here: sms, smtp, whatsapp"}},
		{"smtp missing keys", "atp:\n  notify:\n    smtp:\n      host: smtp.example.org\n", []string{`mesh.yaml:3: atp.notify.smtp: missing required key "port"`, `missing required key "from"`}},
		{"smtp port", "atp:\n  notify:\n    smtp: {host: smtp.example.org, port: 70000, from: atp@example.org}\n", []string{"mesh.yaml:3: atp.notify.smtp.port: 70000 is not a port; use 1..65535"}},
		{"smtp host with port", "atp:\n  notify:\n    smtp: {host: 'smtp.example.org:587', port: 587, from: atp@example.org}\n", []string{"atp.notify.smtp.host:", "the port goes under port"}},
		{"smtp from", "atp:\n  notify:\n    smtp: {host: smtp.example.org, port: 587, from: 'ATP <atp@example.org>'}\n", []string{"atp.notify.smtp.from:", "write e.g. atp@example.org"}},
		{"smtp ca file", "atp:\n  notify:\n    smtp: {host: smtp.example.org, port: 587, from: atp@example.org, ca_file: /nonexistent/ca.pem}\n", []string{"mesh.yaml:3: atp.notify.smtp.ca_file: cannot be read: open /nonexistent/ca.pem: no such file or directory"}},
		{"smtp half auth", "atp:\n  notify:\n    smtp: {host: smtp.example.org, port: 587, from: atp@example.org, username: atp}\n", []string{"atp.notify.smtp.password: username and password go together"}},
		{"webhook plain http", "atp:\n  notify:\n    sms:\n      url: http://sms.example.org/send?key=hunter2\n", []string{"mesh.yaml:4: atp.notify.sms.url: http://sms.example.org/send is plain http", "use https"}},
		{"webhook reserved header", "atp:\n  notify:\n    sms:\n      url: https://sms.example.org/send\n      headers: {authorization: x}\n", []string{"atp.notify.sms.headers: Authorization is set by the service; use token:"}},
		{"webhook user info", "atp:\n  notify:\n    whatsapp: {url: 'https://me:hunter2@wa.example.org/'}\n", []string{"atp.notify.whatsapp.url: https://wa.example.org/ carries a user name or password"}},
		{"supplier missing key", "atp:\n  octo:\n    suppliers:\n      - id: kayak\n        base_url: https://octo.example.org\n", []string{`mesh.yaml:4: atp.octo.suppliers[0]: missing required key "api_key"`}},
		{"supplier id", "atp:\n  octo:\n    suppliers:\n      - {id: 'Kayak:1', base_url: 'https://octo.example.org', api_key: k}\n", []string{`atp.octo.suppliers[0].id: "Kayak:1" is not a supplier id`}},
		{"supplier twice", "atp:\n  octo:\n    suppliers:\n      - {id: a, base_url: 'https://a.example', api_key: k}\n      - {id: a, base_url: 'https://b.example', api_key: k}\n", []string{`atp.octo.suppliers: two suppliers have the id "a"`}},
		{"supplier typo", "atp:\n  octo:\n    suppliers:\n      - {id: a, baseurl: 'https://a.example', api_key: k}\n", []string{`unknown key "baseurl"; did you mean "base_url"?`}},
		{"supplier timeout", "atp:\n  octo:\n    suppliers:\n      - {id: a, base_url: 'https://a.example', api_key: k, timeout: 5}\n", []string{`atp.octo.suppliers[0].timeout: "5" is not a duration`}},
		{"env key unset", "atp:\n  octo:\n    suppliers:\n      - {id: a, base_url: 'https://a.example', api_key: '${ATPCONFIG_TEST_UNSET}'}\n", []string{"atp.octo.suppliers[0].api_key: the environment variable ATPCONFIG_TEST_UNSET is not set"}},
		{"limit", "atp:\n  limits:\n    calls_per_minute: -5\n", []string{"atp.limits.calls_per_minute: is -5; use a positive number, 0 for the default or -1"}},
		{"project limit typo", "atp:\n  limits:\n    projects:\n      demo: {calls_per_minut: 5}\n", []string{`mesh.yaml:4: atp.limits.projects.demo: unknown key "calls_per_minut"; did you mean "calls_per_minute"?`}},
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
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q shows a secret", err)
			}
		})
	}
}

// TestConfiguredIntegrations runs the ATP service with what an atp
// section configures: EMAIL through a local SMTP sink with AUTH PLAIN,
// SMS through a signed webhook, WHATSAPP through a webhook that fails,
// two OCTO suppliers of which one refuses the key (the search is
// partial), and limits. No secret reaches a log line, a result or an
// error.
func TestConfiguredIntegrations(t *testing.T) {
	const smtpPass, smsToken, smsSecret, octoKey, waKey = "smtp-pass-s3cret", "sms-token-s3cret", "sms-sign-s3cret", "octo-key-s3cret", "wa-url-s3cret"
	t.Setenv("ATPCONFIG_TEST_SMTP_PASSWORD", smtpPass)
	t.Setenv("ATPCONFIG_TEST_OCTO_KEY", octoKey)
	sink := notifytest.StartSMTPTLS(t, "atp-mailer", smtpPass)
	caFile := filepath.Join(t.TempDir(), "smtp-ca.pem")
	if err := os.WriteFile(caFile, sink.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	sms := notifytest.StartWebhook(t, http.StatusOK, `{"message_id":"sms-1"}`)
	wa := notifytest.StartWebhook(t, http.StatusBadGateway, `{"error":"carrier down"}`)
	intp := func(n int) *int { return &n }
	good := octotest.Start(t, octoKey, []octo.Product{
		{ID: "prod-kayak", InternalName: "Sea kayak tour", Options: []octo.Option{{ID: "opt-am", Default: true, InternalName: "Morning",
			Units: []octo.Unit{{ID: "unit-adult", Type: "ADULT", PricingFrom: []octo.Price{{Original: 900000, Retail: 850000, Currency: "JPY", CurrencyPrecision: 2}}}}}}},
		{ID: "prod-bike", InternalName: "E-bike rental", Options: []octo.Option{{ID: "opt-day", Default: true}}},
	}, map[string][]octo.Availability{
		"opt-am":  {{ID: "slot-am", LocalDateTimeStart: "2027-01-18T09:00:00+09:00", Available: true, Status: "AVAILABLE", Vacancies: intp(6)}},
		"opt-day": {{ID: "slot-day", LocalDateTimeStart: "2027-01-18T00:00:00+09:00", Available: true, Status: "FREESALE"}},
	})
	wrongKey := octotest.Start(t, "another-key", nil, nil)
	yaml := fmt.Sprintf(`atp:
  notify:
    smtp:
      host: 127.0.0.1
      port: %s
      from: atp@example.test
      username: atp-mailer
      password: ${ATPCONFIG_TEST_SMTP_PASSWORD}
      timeout: 10s
      ca_file: %s
    sms:
      url: %s/send
      token: %s
      secret: %s
      headers: {X-Account: travel-desk}
    whatsapp:
      url: %s/wa?key=%s
  octo:
    timeout: 5s
    suppliers:
      - id: kayak
        base_url: %s
        api_key: ${ATPCONFIG_TEST_OCTO_KEY}
        products: [prod-kayak]
        category: WATER
        location: Otaru
      - id: closed
        base_url: %s
        api_key: %s
  limits:
    calls_per_minute: 50
    projects:
      other: {calls_per_minute: -1}
`, sink.Addr[strings.LastIndexByte(sink.Addr, ':')+1:], caFile, sms.URL, smsToken, smsSecret, wa.URL, waKey, good.URL, wrongKey.URL, octoKey)
	f, err := parse(t, yaml)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var d atp.Deps
	atpconfig.Apply(f, &d, slog.New(slog.NewTextHandler(&logs, nil)))
	if d.RateLimits("demo") != (ratelimit.Limits{CallsPerMinute: 50}) || d.RateLimits("other").CallsPerMinute != -1 ||
		!strings.Contains(logs.String(), "EMAIL=smtp 127.0.0.1:") || !strings.Contains(logs.String(), "WHATSAPP=webhook "+wa.URL+"/wa") ||
		!strings.Contains(logs.String(), `level=WARN msg="atp: a rate limit is off`) {
		t.Fatalf("limits %+v; logs:\n%s", d.RateLimits("demo"), logs.String())
	}

	h := atptest.Start(t, atptest.Options{Notifiers: d.Notifiers, OCTOSuppliers: d.OCTOSuppliers, RateLimits: d.RateLimits})
	b, err := h.Service.LoadFixture(t.Context(), atptest.Project)
	if err != nil {
		t.Fatal(err)
	}
	ag := h.Agent("ops", h.Mandate("ops", atptest.AllTools()))
	var seen []string // every result and error text, checked for secrets
	notifyArgs := func(ch, to string) map[string]any {
		return map[string]any{"booking_object_id": b.ID, "recipient_participant_id": to, "channel": ch, "message_body": "Meet at the gondola at 08:45"}
	}

	t.Run("EMAIL through SMTP with STARTTLS and AUTH PLAIN", func(t *testing.T) {
		r := ag.OK(tools.ToolNotifyTraveller, notifyArgs("EMAIL", "p-ben"))
		seen = append(seen, string(r.Raw))
		mails := sink.Mails()
		if len(mails) != 1 || mails[0].From != "atp@example.test" || strings.Join(mails[0].To, ",") != "ben@example.test" || mails[0].User != "atp-mailer" || !mails[0].TLS ||
			!strings.Contains(mails[0].Data, "Meet at the gondola at 08:45") || r.Obj()["provider_message_id"] != "<"+r.Obj()["notification_id"].(string)+"@utpmesh.atp>" {
			t.Fatalf("mails %+v, result %s", mails, r.Raw)
		}
	})
	t.Run("SMS through a signed webhook", func(t *testing.T) {
		r := ag.OK(tools.ToolNotifyTraveller, notifyArgs("SMS", "p-aiko"))
		seen = append(seen, string(r.Raw))
		hooks := sms.Hooks()
		if len(hooks) != 1 || r.Obj()["provider_message_id"] != "sms-1" {
			t.Fatalf("hooks %d, result %s", len(hooks), r.Raw)
		}
		hk := hooks[0]
		var body map[string]string
		if err := json.Unmarshal(hk.Body, &body); err != nil || body["to"] != "+81000000001" || body["channel"] != "SMS" {
			t.Fatalf("body %s", hk.Body)
		}
		if hk.Header.Get("Authorization") != "Bearer "+smsToken || hk.Header.Get("X-Account") != "travel-desk" ||
			hk.Header.Get(notify.SignatureHeader) != notify.Sign(smsSecret, hk.Body) || hk.Header.Get("Idempotency-Key") != body["notification_id"] {
			t.Fatalf("headers %v", hk.Header)
		}
	})
	t.Run("WHATSAPP provider down", func(t *testing.T) {
		e := ag.Fail(tools.ToolNotifyTraveller, notifyArgs("WHATSAPP", "p-aiko"), card.CodeUpstreamUnavailable)
		seen = append(seen, e.Message)
		if len(wa.Hooks()) != 1 || !strings.Contains(e.Message, "502 Bad Gateway") || !strings.Contains(e.Message, wa.URL+"/wa") {
			t.Fatalf("error %+v", e)
		}
	})
	t.Run("OCTO: one supplier refuses the key, the search is partial", func(t *testing.T) {
		r := ag.Call(tools.ToolSearchActivities, map[string]any{"date": "2027-01-18", "category": "water"})
		seen = append(seen, string(r.Raw))
		acts, _ := r.Value.([]any)
		if r.Status != card.StatusPartial || len(acts) != 1 || atptest.Str(acts[0], "activity_id") != "octo:kayak:prod-kayak:opt-am" ||
			atptest.Str(acts[0], "octo", "availability_id") != "slot-am" || atptest.Get(acts[0], "pricing_snapshot", "amount") != float64(8500) {
			t.Fatalf("status %s, result %s", r.Status, r.Raw)
		}
		// prod-bike is not in products: its availability is never asked.
		if got := strings.Join(good.Requests(), ","); got != "GET /products,POST /availability" {
			t.Fatalf("requests to the supplier: %s", got)
		}
		if got := strings.Join(wrongKey.Requests(), ","); got != "GET /products" {
			t.Fatalf("requests to the closed supplier: %s", got)
		}
	})
	for _, s := range append(seen, logs.String()) {
		for _, secret := range []string{smtpPass, smsToken, smsSecret, octoKey, waKey} {
			if strings.Contains(s, secret) {
				t.Errorf("a secret shows: %s", s)
			}
		}
	}
}

// TestNoSection: a file without the atp section changes nothing.
func TestNoSection(t *testing.T) {
	f, err := parse(t, "# no sections\n")
	if err != nil {
		t.Fatal(err)
	}
	d := atp.Deps{TickEvery: time.Second}
	atpconfig.Apply(f, &d, nil)
	if d.Notifiers != nil || d.OCTOSuppliers != nil || d.RateLimits != nil {
		t.Fatalf("deps changed: %+v", d)
	}
}
