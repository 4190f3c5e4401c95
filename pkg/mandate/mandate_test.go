package mandate

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cedar-policy/cedar-go"
)

var t0 = time.Date(2026, 4, 7, 12, 0, 0, 0, time.UTC)

const readPolicy = `@id("read")
permit(principal == Agent::"a1", action == ATPAction::"get_context_package", resource);`

func mustKey(t testing.TB, project string) *IssuerKey {
	t.Helper()
	k, err := GenerateKey(project)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func issue(t testing.TB, k *IssuerKey, policy string, mod func(*Claims)) string {
	t.Helper()
	c := Claims{Subject: "a1", ExpiresAt: t0.Add(time.Hour).Unix(), Mandate: Grant{PolicySet: policy}}
	if mod != nil {
		mod(&c)
	}
	tok, err := Issue(k, c, t0)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestVerify(t *testing.T) {
	k := mustKey(t, "demo")
	other := mustKey(t, "demo") // same issuer name, different key
	elsewhere := mustKey(t, "other")
	good := issue(t, k, readPolicy, nil)
	parts := strings.Split(good, ".")
	// Forge: change the subject, keep the signature.
	claims, _ := base64.RawURLEncoding.DecodeString(parts[1])
	forgedClaims := strings.Replace(string(claims), `"sub":"a1"`, `"sub":"a2"`, 1)
	forged := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(forgedClaims)) + "." + parts[2]
	// Same claims and kid, signed by another key.
	resigned := issue(t, other, readPolicy, nil)
	rp := strings.Split(resigned, ".")
	wrongKeySig := parts[0] + "." + parts[1] + "." + rp[2]

	keys := StaticKeys{k, elsewhere}
	tests := []struct {
		name   string
		token  string
		issuer string
		now    time.Time
		want   error
	}{
		{"valid", good, IssuerName("demo"), t0.Add(time.Minute), nil},
		{"valid any issuer", good, "", t0.Add(time.Minute), nil},
		{"expired", good, IssuerName("demo"), t0.Add(2 * time.Hour), ErrExpired},
		{"issued in the future", good, IssuerName("demo"), t0.Add(-time.Hour), ErrNotYetValid},
		{"wrong issuer", good, IssuerName("other"), t0, ErrWrongIssuer},
		{"forged claims", forged, IssuerName("demo"), t0, ErrSignature},
		{"signature of another key", wrongKeySig, IssuerName("demo"), t0, ErrSignature},
		{"unknown kid", resigned, IssuerName("demo"), t0, ErrUnknownKey},
		{"not a token", "hello", "", t0, ErrMalformed},
		{"alg none", base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"atp-mandate+jwt"}`)) + "." + parts[1] + ".", "", t0, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := &Verifier{Keys: keys, Now: func() time.Time { return tc.now }}
			m, err := v.Verify(context.Background(), tc.token, tc.issuer)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
			if err == nil && (m.Claims.Subject != "a1" || m.Policies == nil || m.Claims.BoundResource() != "") {
				t.Fatalf("claims = %+v", m.Claims)
			}
		})
	}
}

func TestIssueRefuses(t *testing.T) {
	k := mustKey(t, "demo")
	RegisterPolicyCheck("test", testRule{})
	defer UnregisterPolicyCheck("test")
	tests := []struct {
		name   string
		policy string
		mod    func(*Claims)
		want   error
		msg    string
	}{
		{"syntax error names the line", "permit(principal, action, resource);\npermit(principal action);", nil, ErrInvalidClaims, ":2:"},
		{"no subject", readPolicy, func(c *Claims) { c.Subject = "" }, ErrInvalidClaims, "sub"},
		{"exp before iat", readPolicy, func(c *Claims) { c.ExpiresAt = t0.Add(-time.Hour).Unix() }, ErrInvalidClaims, "exp"},
		{"empty booking", readPolicy, func(c *Claims) { s := ""; c.Resource = &s }, ErrInvalidClaims, "null"},
		{"bad agent_pub", readPolicy, func(c *Claims) { c.AgentPub = "xyz" }, ErrInvalidClaims, "agent_pub"},
		{"duplicate id", readPolicy + "\n" + readPolicy, nil, ErrInvalidClaims, "used twice"},
		{"a catalogue's rule", `@id("refused") permit(principal, action, resource);`, nil, errRefusedByTest, "refused by the test rule"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Claims{Subject: "a1", ExpiresAt: t0.Add(time.Hour).Unix(), Mandate: Grant{PolicySet: tc.policy}}
			if tc.mod != nil {
				tc.mod(&c)
			}
			_, err := Issue(k, c, t0)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Issue = %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
		})
	}
}

// errRefusedByTest is the error of testRule.
var errRefusedByTest = errors.New("refused by the test rule")

// testRule is a catalogue's rule on mandates: no policy may have the id
// "refused".
type testRule struct{}

func (testRule) CheckPolicies(ps *cedar.PolicySet) error {
	if ps.Get("refused") != nil {
		return fmt.Errorf("%w: policy refused", errRefusedByTest)
	}
	return nil
}

// TestPolicyCheck: a registered rule refuses at Issue and in
// CheckPolicies (wrapping ErrPolicyRefused and its own error, with its own
// message); unregistered, it refuses nothing.
func TestPolicyCheck(t *testing.T) {
	k := mustKey(t, "demo")
	bad := Claims{Subject: "a1", ExpiresAt: t0.Add(time.Hour).Unix(), Mandate: Grant{PolicySet: `@id("refused") permit(principal, action, resource);`}}
	for _, tc := range []struct {
		name     string
		register bool
		want     error
	}{
		{"registered", true, errRefusedByTest},
		{"unregistered", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.register {
				RegisterPolicyCheck("test", testRule{})
				defer UnregisterPolicyCheck("test")
			}
			_, err := Issue(k, bad, t0)
			if !errors.Is(err, tc.want) || (tc.want != nil && (!errors.Is(err, ErrPolicyRefused) || err.Error() != "refused by the test rule: policy refused")) {
				t.Fatalf("Issue = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestKeyDir(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "keys")
	d := NewKeyDir(dir)
	if _, err := d.Load(ctx, "demo"); !errors.Is(err, ErrNoKey) {
		t.Fatalf("Load of a missing key = %v", err)
	}
	k, created, err := d.Ensure(ctx, "demo")
	if err != nil || !created {
		t.Fatalf("Ensure = %v, %v", created, err)
	}
	fi, err := os.Stat(d.Path("demo"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode = %v, %v", fi.Mode(), err)
	}
	// A fresh KeyDir reads the same key back.
	d2 := NewKeyDir(dir)
	k2, created, err := d2.Ensure(ctx, "demo")
	if err != nil || created || k2.KID != k.KID {
		t.Fatalf("second Ensure = %v %v %v", k2, created, err)
	}
	tok := issue(t, k, readPolicy, nil)
	v := &Verifier{Keys: d2, Now: func() time.Time { return t0 }}
	if _, err := v.Verify(ctx, tok, IssuerName("demo")); err != nil {
		t.Fatal(err)
	}
	if _, err := d2.PublicKey(ctx, "someone-else", k.KID); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("foreign issuer = %v", err)
	}
	if _, err := d2.PublicKey(ctx, IssuerName("nokey"), k.KID); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("project without key = %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	k := mustKey(f, "demo")
	f.Add(issue(f, k, readPolicy, nil))
	f.Add(issue(f, k, `permit(principal, action == ATPAction::"invoke_hem", resource) when { ["HEM-01"].contains(context.hem_id) };`,
		func(c *Claims) { b := "bk-1"; c.Resource = &b; c.ParentChain = []string{"root"} }))
	f.Add("a.b.c")
	f.Add("")
	f.Add("eyJhbGciOiJFZERTQSIsInR5cCI6ImF0cC1tYW5kYXRlK2p3dCJ9.e30.AAAA")
	v := &Verifier{Keys: StaticKeys{k}, Now: func() time.Time { return t0 }}
	f.Fuzz(func(t *testing.T, tok string) {
		m, err := Decode(tok)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if m.Policies == nil || m.Claims.Subject == "" || m.Header.Typ != TokenType {
			t.Fatalf("decoded an incomplete mandate: %+v", m)
		}
		_ = v.VerifyDecoded(context.Background(), m, "")
	})
}
