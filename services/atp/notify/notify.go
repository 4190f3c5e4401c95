// Package notify holds the delivery adapters of atp_notify_traveller:
// SMTP for EMAIL and an HTTP webhook provider for SMS and WHATSAPP. Each
// is an atp.Notifier.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/smtp"
	"net/url"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/services/atp"
)

// ErrDelivery: the provider refused or could not be reached.
var ErrDelivery = errors.New("notify: delivery failed")

// SMTP delivers EMAIL through an SMTP server: STARTTLS when the server
// offers it, then PLAIN auth when Username is set (net/smtp refuses to
// send the password unencrypted to any host but localhost).
type SMTP struct {
	// Addr is host:port of the server.
	Addr string
	// From is the envelope and header sender.
	From string
	// Username and Password enable PLAIN auth when Username is set.
	Username, Password string
	// Timeout bounds one delivery; default 10s.
	Timeout time.Duration
	// RootCAs verify the server's STARTTLS certificate; nil: the
	// system's roots.
	RootCAs *x509.CertPool
}

var _ atp.Notifier = (*SMTP)(nil)

// Send implements atp.Notifier.
func (s *SMTP) Send(ctx context.Context, m atp.Message) (string, error) {
	if strings.ContainsAny(m.To, "\r\n") || strings.ContainsAny(s.From, "\r\n") {
		return "", fmt.Errorf("%w: address contains a line break", ErrDelivery)
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", s.Addr)
	if err != nil {
		return "", fmt.Errorf("%w: smtp %s: %v", ErrDelivery, s.Addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	host, _, _ := net.SplitHostPort(s.Addr)
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		conn.Close()
		return "", fmt.Errorf("%w: smtp %s: %v", ErrDelivery, s.Addr, err)
	}
	defer c.Close()
	if ok, _ := c.Extension("STARTTLS"); ok {
		if err := c.StartTLS(&tls.Config{ServerName: host, RootCAs: s.RootCAs, MinVersion: tls.VersionTLS12}); err != nil {
			return "", fmt.Errorf("%w: smtp %s STARTTLS: %v", ErrDelivery, s.Addr, err)
		}
	}
	if s.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", s.Username, s.Password, host)); err != nil {
			return "", fmt.Errorf("%w: smtp auth: %v", ErrDelivery, err)
		}
	}
	msgID := "<" + m.NotificationID + "@utpmesh.atp>"
	var body bytes.Buffer
	fmt.Fprintf(&body, "From: %s\r\nTo: %s\r\nSubject: Your booking %s\r\nMessage-ID: %s\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n",
		s.From, m.To, m.BookingID, msgID)
	body.WriteString(strings.ReplaceAll(strings.ReplaceAll(m.Body, "\r\n", "\n"), "\n", "\r\n"))
	body.WriteString("\r\n")
	if err := c.Mail(s.From); err != nil {
		return "", fmt.Errorf("%w: smtp MAIL FROM: %v", ErrDelivery, err)
	}
	if err := c.Rcpt(m.To); err != nil {
		return "", fmt.Errorf("%w: smtp RCPT TO %s: %v", ErrDelivery, m.To, err)
	}
	w, err := c.Data()
	if err != nil {
		return "", fmt.Errorf("%w: smtp DATA: %v", ErrDelivery, err)
	}
	if _, err := w.Write(body.Bytes()); err != nil {
		return "", fmt.Errorf("%w: smtp DATA: %v", ErrDelivery, err)
	}
	if err := w.Close(); err != nil {
		return "", fmt.Errorf("%w: smtp end of DATA: %v", ErrDelivery, err)
	}
	_ = c.Quit()
	return msgID, nil
}

// Webhook delivers SMS or WHATSAPP by POSTing JSON to a provider URL:
// {"notification_id","channel","to","body","template_id","booking_object_id"}
// with the header Idempotency-Key: <notification_id>. A 2xx answer is
// success; its JSON "message_id", when present, is the provider id.
// Errors name the URL without its query, user info or fragment, which
// may hold credentials.
type Webhook struct {
	URL string
	// Token, when set, is sent as "Authorization: Bearer <token>".
	Token string
	// Secret, when set, signs the body: the header SignatureHeader
	// carries "sha256=" and the hex HMAC-SHA256 of the body under Secret.
	Secret string
	// Headers are added to every request (e.g. a provider's account id).
	Headers map[string]string
	// Timeout bounds one delivery when Client is nil; default 10s.
	Timeout time.Duration
	// Client; default one with Timeout.
	Client *http.Client
}

// SignatureHeader carries a Webhook's body signature.
const SignatureHeader = "X-Utpmesh-Signature"

// Sign is the SignatureHeader value of body under secret.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Redact is u without its query, user info and fragment, for errors and
// logs.
func Redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(an unparsable URL)"
	}
	p.User, p.RawQuery, p.Fragment, p.ForceQuery = nil, "", "", false
	return p.String()
}

var _ atp.Notifier = (*Webhook)(nil)

// Send implements atp.Notifier.
func (w *Webhook) Send(ctx context.Context, m atp.Message) (string, error) {
	payload, _ := json.Marshal(map[string]string{"notification_id": m.NotificationID, "channel": m.Channel, "to": m.To,
		"body": m.Body, "template_id": m.TemplateID, "booking_object_id": m.BookingID})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(payload))
	if err != nil {
		return "", fmt.Errorf("%w: webhook URL %s is not valid", ErrDelivery, Redact(w.URL))
	}
	for k, v := range w.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", m.NotificationID)
	if w.Token != "" {
		req.Header.Set("Authorization", "Bearer "+w.Token)
	}
	if w.Secret != "" {
		req.Header.Set(SignatureHeader, Sign(w.Secret, payload))
	}
	cl := w.Client
	if cl == nil {
		timeout := w.Timeout
		if timeout <= 0 {
			timeout = 10 * time.Second
		}
		cl = &http.Client{Timeout: timeout}
	}
	resp, err := cl.Do(req)
	if err != nil {
		// *url.Error repeats the whole URL; name the redacted one.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", fmt.Errorf("%w: webhook %s: %v", ErrDelivery, Redact(w.URL), err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("%w: webhook %s answered %s: %s", ErrDelivery, Redact(w.URL), resp.Status, strings.TrimSpace(string(body)))
	}
	var r struct {
		MessageID string `json:"message_id"`
	}
	_ = json.Unmarshal(body, &r)
	return r.MessageID, nil
}
