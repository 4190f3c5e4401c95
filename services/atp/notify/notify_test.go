package notify_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/notify"
	"github.com/utpmesh/utpmesh/services/atp/notify/notifytest"
)

var msg = atp.Message{NotificationID: "ntf_1", Channel: "SMS", To: "+81000000001", Body: "line one\nline two\n.dot line", BookingID: "b-1"}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"https://sms.example.org/send?key=s3cret":    "https://sms.example.org/send",
		"https://user:s3cret@sms.example.org/a#frag": "https://sms.example.org/a",
		"http://127.0.0.1:8080/hook":                 "http://127.0.0.1:8080/hook",
		"://bad":                                     "(an unparsable URL)",
	} {
		if got := notify.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWebhook: the request carries the body, idempotency key, token,
// signature and extra headers (which cannot replace the service's own);
// a refusal names the URL without its query.
func TestWebhook(t *testing.T) {
	ok := notifytest.StartWebhook(t, http.StatusAccepted, `{"message_id":"p-9"}`)
	w := &notify.Webhook{URL: ok.URL + "/send?key=s3cret", Token: "tok-s3cret", Secret: "sign-s3cret",
		Headers: map[string]string{"X-Account": "desk", "Idempotency-Key": "forged"}}
	id, err := w.Send(context.Background(), msg)
	if err != nil || id != "p-9" {
		t.Fatalf("send: %q %v", id, err)
	}
	h := ok.Hooks()[0]
	if h.Header.Get("Idempotency-Key") != "ntf_1" || h.Header.Get("Authorization") != "Bearer tok-s3cret" || h.Header.Get("X-Account") != "desk" ||
		h.Header.Get(notify.SignatureHeader) != notify.Sign("sign-s3cret", h.Body) || !strings.Contains(string(h.Body), `"to":"+81000000001"`) {
		t.Fatalf("request %v %s", h.Header, h.Body)
	}
	down := notifytest.StartWebhook(t, http.StatusTooManyRequests, `slow down`)
	_, err = (&notify.Webhook{URL: down.URL + "/send?key=s3cret"}).Send(context.Background(), msg)
	if !errors.Is(err, notify.ErrDelivery) || !strings.Contains(err.Error(), down.URL+"/send answered 429 Too Many Requests: slow down") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("refusal: %v", err)
	}
	down.Close()
	_, err = (&notify.Webhook{URL: down.URL + "/send?key=s3cret"}).Send(context.Background(), msg)
	if !errors.Is(err, notify.ErrDelivery) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("unreachable: %v", err)
	}
}

// TestSMTP: a message through the sink with AUTH PLAIN, dot-stuffed and
// with CRLF line ends; a wrong password is refused without showing it.
func TestSMTP(t *testing.T) {
	sink := notifytest.StartSMTP(t, "mailer", "pw-s3cret")
	s := &notify.SMTP{Addr: sink.Addr, From: "atp@example.test", Username: "mailer", Password: "pw-s3cret"}
	m := msg
	m.Channel, m.To = "EMAIL", "ben@example.test"
	id, err := s.Send(context.Background(), m)
	if err != nil || id != "<ntf_1@utpmesh.atp>" {
		t.Fatalf("send: %q %v", id, err)
	}
	got := sink.Mails()
	if len(got) != 1 || got[0].User != "mailer" || got[0].From != "atp@example.test" || got[0].To[0] != "ben@example.test" ||
		!strings.Contains(got[0].Data, "Subject: Your booking b-1\r\n") || !strings.HasSuffix(got[0].Data, "\r\n\r\nline one\r\nline two\r\n.dot line\r\n") {
		t.Fatalf("mails %+v", got)
	}
	bad := *s
	bad.Password = "wrong-s3cret"
	_, err = bad.Send(context.Background(), m)
	if !errors.Is(err, notify.ErrDelivery) || !strings.Contains(err.Error(), "smtp auth") || strings.Contains(err.Error(), "s3cret") || sink.AuthFailures() != 1 {
		t.Fatalf("wrong password: %v (failures %d)", err, sink.AuthFailures())
	}
	noAuth := *s
	noAuth.Username, noAuth.Password = "", ""
	if _, err = noAuth.Send(context.Background(), m); !errors.Is(err, notify.ErrDelivery) || !strings.Contains(err.Error(), "530") {
		t.Fatalf("without auth: %v", err)
	}
	if _, err := (&notify.SMTP{Addr: sink.Addr, From: "atp@example.test"}).Send(context.Background(), atp.Message{To: "a@b\r\nRCPT TO:<x@y>"}); err == nil {
		t.Fatal("a recipient with a line break was sent")
	}
}

// TestSMTPStartTLS: a server that offers STARTTLS gets the message and
// the password over TLS only; a certificate the client does not trust
// stops the delivery before AUTH.
func TestSMTPStartTLS(t *testing.T) {
	sink := notifytest.StartSMTPTLS(t, "mailer", "pw-s3cret")
	m := msg
	m.Channel, m.To = "EMAIL", "ben@example.test"
	s := &notify.SMTP{Addr: sink.Addr, From: "atp@example.test", Username: "mailer", Password: "pw-s3cret", RootCAs: sink.CertPool}
	if _, err := s.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if got := sink.Mails(); len(got) != 1 || !got[0].TLS || got[0].User != "mailer" {
		t.Fatalf("mails %+v", got)
	}
	untrusted := *s
	untrusted.RootCAs = nil
	_, err := untrusted.Send(context.Background(), m)
	if !errors.Is(err, notify.ErrDelivery) || !strings.Contains(err.Error(), "STARTTLS") || !strings.Contains(err.Error(), "certificate") || len(sink.Mails()) != 1 || sink.AuthFailures() != 0 {
		t.Fatalf("untrusted certificate: %v", err)
	}
}
