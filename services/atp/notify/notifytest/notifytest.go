// Package notifytest holds local endpoints for tests of ATP's notify
// adapters: an SMTP sink on a random port that speaks enough of RFC 5321
// (EHLO/HELO, STARTTLS with a certificate of its own, AUTH PLAIN, MAIL,
// RCPT, DATA with dot-unstuffing, RSET, NOOP, QUIT) and a webhook
// receiver over net/http/httptest. Both keep
// what they received; a delivery is recorded before it is acknowledged,
// so a test reads it as soon as the send returns.
package notifytest

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Mail is one message the SMTP sink accepted.
type Mail struct {
	From string
	To   []string
	// Data is the message (headers and body) with CRLF line ends.
	Data string
	// User is the AUTH PLAIN identity, "" without auth.
	User string
	// TLS reports whether the session had switched to TLS (STARTTLS).
	TLS bool
}

// SMTP is a running SMTP sink.
type SMTP struct {
	// Addr is host:port.
	Addr string
	// user and password, when user is set, are required (AUTH PLAIN)
	// before MAIL; a wrong pair is answered 535.
	user, password string
	// CertPool trusts the sink's certificate and CertPEM is it, PEM
	// encoded (StartSMTPTLS); nil otherwise.
	CertPool     *x509.CertPool
	CertPEM      []byte
	tlsConfig    *tls.Config
	mu           sync.Mutex
	mails        []Mail
	authFailures int
}

// StartSMTP starts a sink on 127.0.0.1; with user set it requires AUTH
// PLAIN with user and password. It stops when the test ends.
func StartSMTP(t testing.TB, user, password string) *SMTP {
	t.Helper()
	return start(t, &SMTP{user: user, password: password})
}

// StartSMTPTLS is StartSMTP with STARTTLS offered, under a certificate
// for 127.0.0.1 that only CertPool trusts.
func StartSMTPTLS(t testing.TB, user, password string) *SMTP {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return start(t, &SMTP{user: user, password: password, CertPool: pool, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		tlsConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}})
}

func start(t testing.TB, s *SMTP) *SMTP {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); s.serve(c) }()
		}
	}()
	return s
}

// Mails are the accepted messages, in order.
func (s *SMTP) Mails() []Mail {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Mail(nil), s.mails...)
}

// AuthFailures counts refused AUTH attempts.
func (s *SMTP) AuthFailures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.authFailures
}

func (s *SMTP) serve(c net.Conn) {
	defer func() { _ = c.Close() }()
	r := bufio.NewReader(c)
	say := func(line string) { _, _ = io.WriteString(c, line+"\r\n") }
	say("220 notifytest ESMTP")
	var cur Mail
	authed, secure := "", false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO":
			say("250-notifytest")
			say("250-8BITMIME")
			if s.tlsConfig != nil && !secure {
				say("250-STARTTLS")
			}
			say("250 AUTH PLAIN")
		case "STARTTLS":
			if s.tlsConfig == nil || secure {
				say("502 5.5.1 STARTTLS not offered")
				continue
			}
			say("220 2.0.0 ready to start TLS")
			tc := tls.Server(c, s.tlsConfig)
			if err := tc.Handshake(); err != nil {
				return // the client refused the certificate
			}
			c, r, secure = tc, bufio.NewReader(tc), true
			cur, authed = Mail{}, "" // RFC 3207: the session starts over
		case "HELO":
			say("250 notifytest")
		case "AUTH":
			mech, resp, _ := strings.Cut(arg, " ")
			if !strings.EqualFold(mech, "PLAIN") {
				say("504 5.5.4 only AUTH PLAIN")
				continue
			}
			if resp == "" {
				say("334 ")
				l, err := r.ReadString('\n')
				if err != nil {
					return
				}
				resp = strings.TrimRight(l, "\r\n")
			}
			raw, _ := base64.StdEncoding.DecodeString(resp)
			parts := strings.Split(string(raw), "\x00")
			if len(parts) == 3 && s.user != "" && parts[1] == s.user && parts[2] == s.password {
				authed = parts[1]
				say("235 2.7.0 authenticated")
				continue
			}
			s.mu.Lock()
			s.authFailures++
			s.mu.Unlock()
			say("535 5.7.8 authentication failed")
		case "MAIL":
			if s.user != "" && authed == "" {
				say("530 5.7.0 authentication required")
				continue
			}
			cur = Mail{From: address(arg), User: authed, TLS: secure}
			say("250 2.1.0 ok")
		case "RCPT":
			cur.To = append(cur.To, address(arg))
			say("250 2.1.5 ok")
		case "DATA":
			if cur.From == "" || len(cur.To) == 0 {
				say("503 5.5.1 MAIL and RCPT first")
				continue
			}
			say("354 end with <CRLF>.<CRLF>")
			var data strings.Builder
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if l == ".\r\n" {
					break
				}
				data.WriteString(strings.TrimPrefix(l, "."))
			}
			cur.Data = data.String()
			s.mu.Lock()
			s.mails = append(s.mails, cur)
			s.mu.Unlock()
			cur = Mail{}
			say("250 2.0.0 queued")
		case "RSET":
			cur = Mail{}
			say("250 2.0.0 ok")
		case "NOOP":
			say("250 2.0.0 ok")
		case "QUIT":
			say("221 2.0.0 bye")
			return
		default:
			say("502 5.5.2 command not recognized")
		}
	}
}

// address is the path of "FROM:<a@b>" or "TO:<a@b>".
func address(arg string) string {
	_, v, _ := strings.Cut(arg, ":")
	v = strings.TrimSpace(v)
	if i := strings.IndexByte(v, ' '); i >= 0 {
		v = v[:i] // parameters such as BODY=8BITMIME
	}
	return strings.Trim(v, "<>")
}

// Hook is one request the webhook receiver took.
type Hook struct {
	Header http.Header
	Body   []byte
}

// Webhook is a running webhook receiver.
type Webhook struct {
	*httptest.Server
	mu     sync.Mutex
	hooks  []Hook
	status int
	answer string
}

// StartWebhook starts a receiver that answers status with body answer.
// It stops when the test ends.
func StartWebhook(t testing.TB, status int, answer string) *Webhook {
	t.Helper()
	w := &Webhook{status: status, answer: answer}
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.mu.Lock()
		w.hooks = append(w.hooks, Hook{Header: r.Header.Clone(), Body: body})
		w.mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(w.status)
		_, _ = io.WriteString(rw, w.answer)
	}))
	t.Cleanup(w.Close)
	return w
}

// Hooks are the requests taken, in order.
func (w *Webhook) Hooks() []Hook {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Hook(nil), w.hooks...)
}
