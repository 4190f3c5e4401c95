package reqsign_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/utpmesh/utpmesh/internal/reqsign"
)

// signer is a nats.Conn whose options carry an nkey, as after
// nats.NkeyOptionFromSeed; Wrap only reads them.
func signer(t *testing.T) (*nats.Conn, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	nc := &nats.Conn{Opts: nats.Options{Nkey: pub, SignatureCB: kp.Sign}}
	return nc, pub
}

func TestSignAndVerify(t *testing.T) {
	nc, pub := signer(t)
	other, _ := signer(t)
	const subj = "cg.v1r3.demo.default.svc.authz.put"
	req := []byte(`{"policies":"permit(principal, action, resource);"}`)
	body, err := reqsign.Wrap(nc, subj, req)
	if err != nil {
		t.Fatal(err)
	}
	names := func(p string) (string, bool) { return "admin", p == pub }
	tamper := func(f func(m map[string]any)) []byte {
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	strangerBody, _ := reqsign.Wrap(other, subj, req)
	tests := []struct {
		name    string
		subject string
		body    []byte
		now     time.Time
		names   reqsign.Names
		signer  string
		err     string
	}{
		{"signed by a known identity", subj, body, time.Now(), names, "identity:admin", ""},
		{"signed, no identities known", subj, body, time.Now(), nil, "key:" + pub, ""},
		{"unsigned", subj, req, time.Now(), names, "", ""},
		{"replayed on another project's subject", "cg.v1r3.other.default.svc.authz.put", body, time.Now(), names, "", "does not match"},
		{"request altered", subj, tamper(func(m map[string]any) {
			m["request"] = map[string]any{"policies": "forbid(principal, action, resource);"}
		}), time.Now(), names, "", "does not match"},
		{"too old", subj, body, time.Now().Add(reqsign.MaxSkew + time.Minute), names, "", "from the server's clock"},
		{"a key of no identity", subj, strangerBody, time.Now(), names, "", "no identity of this mesh"},
		{"not a user key", subj, tamper(func(m map[string]any) { m["signed"].(map[string]any)["key"] = "Nxxx" }), time.Now(), names, "", "not a public user nkey"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, who, err := reqsign.Unwrap(tc.subject, tc.body, tc.now, tc.names)
			if tc.err != "" {
				if !errors.Is(err, reqsign.ErrSignature) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Unwrap = %v, want ErrSignature naming %q", err, tc.err)
				}
				return
			}
			if err != nil || who != tc.signer || string(got) != string(req) {
				t.Fatalf("Unwrap = %s, %q, %v; want the request, %q", got, who, err, tc.signer)
			}
		})
	}
	if b, _ := reqsign.Wrap(&nats.Conn{}, subj, req); string(b) != string(req) {
		t.Fatalf("Wrap without an nkey changed the body: %s", b)
	}
}
