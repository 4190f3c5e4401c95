// Package reqsign names who sent a mesh request: a client that connected
// with an nkey signs the request with the same key (the seed never
// leaves it: nats.go's signature callback signs, as for the server's
// nonce), and the service verifies the signature against the public keys
// of the mesh's identities (<data>/creds, internal/meshauth).
//
// Why this and not something nats-server offers: a server sees the NATS
// user of a message only when it crosses a service import between
// accounts (the Nats-Request-Info header, with share: true); the mesh is
// one account, and a header a client sets in the same account is not
// checked by anyone. Auth callout would need an external auth service.
// Signing reuses the key the client already proved at connect.
//
// Wire format: the request body becomes
//
//	{"signed": {"key": "U…", "at": "<RFC 3339>", "sig": "<base64url>"}, "request": <the request object>}
//
// where sig is the Ed25519 signature (nkeys) of
//
//	"utpmesh-request-v1\n" + subject + "\n" + at + "\n" + hex(SHA-256(request bytes as sent))
//
// so a signature binds the subject (project, service, operation) and the
// exact request bytes, and is accepted for MaxSkew around the server's
// clock. Limits: within that window the same signed request can be
// replayed by someone who saw it (only subscribers of the service's
// subject can, which NATS permissions keep to the core and admin); a
// client connected with a .creds file (JWT) does not sign.
package reqsign

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// MaxSkew is how far a signature's time may be from the server's clock.
const MaxSkew = 5 * time.Minute

// ErrSignature: a signed request whose signature does not verify, is
// outside MaxSkew, or whose key is no identity of the mesh.
var ErrSignature = errors.New("reqsign: bad request signature")

// Signature is the "signed" object of a request.
type Signature struct {
	Key string    `json:"key"`
	At  time.Time `json:"at"`
	Sig string    `json:"sig"`
}

// envelope is a signed request body.
type envelope struct {
	Signed  *Signature      `json:"signed"`
	Request json.RawMessage `json:"request"`
}

func payload(subject string, at time.Time, req []byte) []byte {
	sum := sha256.Sum256(req)
	return []byte("utpmesh-request-v1\n" + subject + "\n" + at.UTC().Format(time.RFC3339Nano) + "\n" + hex.EncodeToString(sum[:]))
}

// Wrap returns the body to send for the JSON request req on subject:
// signed with nc's nkey when nc connected with one, else req unchanged.
func Wrap(nc *nats.Conn, subject string, req []byte) ([]byte, error) {
	if nc == nil || nc.Opts.Nkey == "" || nc.Opts.SignatureCB == nil {
		return req, nil
	}
	at := time.Now().UTC()
	sig, err := nc.Opts.SignatureCB(payload(subject, at, req))
	if err != nil {
		return nil, fmt.Errorf("reqsign: sign: %w", err)
	}
	return json.Marshal(envelope{Signed: &Signature{Key: nc.Opts.Nkey, At: at, Sig: base64.RawURLEncoding.EncodeToString(sig)}, Request: req})
}

// Names resolves a public nkey to the name of the mesh identity that
// holds it (e.g. "admin"); ok is false for an unknown key.
type Names func(pub string) (name string, ok bool)

// Unwrap returns the request of body received on subject and who signed
// it: "identity:<name>" for a key names knows, "key:<pub>" for a valid
// signature when names is nil, "" for an unsigned body (returned as is).
// A signature that fails, or a key names does not know, is ErrSignature
// (the error names the key, for the audit).
func Unwrap(subject string, body []byte, now time.Time, names Names) (req []byte, signer string, err error) {
	var env envelope
	if json.Unmarshal(body, &env) != nil || env.Signed == nil || len(env.Request) == 0 {
		return body, "", nil
	}
	s := env.Signed
	kp, err := nkeys.FromPublicKey(s.Key)
	if err != nil || !nkeys.IsValidPublicUserKey(s.Key) {
		return nil, "", fmt.Errorf("%w: key %q is not a public user nkey", ErrSignature, s.Key)
	}
	sig, err := base64.RawURLEncoding.DecodeString(s.Sig)
	if err != nil || kp.Verify(payload(subject, s.At, env.Request), sig) != nil {
		return nil, "", fmt.Errorf("%w: the signature of key %s does not match the request on %s", ErrSignature, s.Key, subject)
	}
	if d := now.Sub(s.At); d > MaxSkew || d < -MaxSkew {
		return nil, "", fmt.Errorf("%w: signed at %s by key %s, more than %v from the server's clock (%s)", ErrSignature,
			s.At.UTC().Format(time.RFC3339), s.Key, MaxSkew, now.UTC().Format(time.RFC3339))
	}
	if names == nil {
		return env.Request, "key:" + s.Key, nil
	}
	name, ok := names(s.Key)
	if !ok {
		return nil, "", fmt.Errorf("%w: key %s is no identity of this mesh", ErrSignature, s.Key)
	}
	return env.Request, "identity:" + name, nil
}
