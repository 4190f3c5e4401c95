package mandate

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cedar-policy/cedar-go"
	"github.com/google/uuid"
)

// Token constants.
const (
	// TokenType is the JWS header typ of a mandate.
	TokenType = "atp-mandate+jwt"
	// Algorithm is the only JWS alg accepted.
	Algorithm = "EdDSA"
	// RARFormat is the only mandate.rarFormat accepted.
	RARFormat = "cedar"
	// ATPVersion is the atp_version written into new mandates.
	ATPVersion = "1.0"
	// MaxTokenBytes bounds a token; longer input is refused before decoding.
	MaxTokenBytes = 64 << 10
	// DefaultLeeway is the clock skew Verify tolerates on iat and exp.
	DefaultLeeway = 30 * time.Second
)

// Errors. Every error of this package wraps exactly one of them.
var (
	// ErrMalformed: the token is not a well-formed mandate (shape, base64,
	// JSON, header, required claims, Cedar syntax).
	ErrMalformed = errors.New("mandate: malformed token")
	// ErrSignature: the signature does not verify with the issuer's key
	// (forged or altered token).
	ErrSignature = errors.New("mandate: bad signature")
	// ErrExpired: exp has passed.
	ErrExpired = errors.New("mandate: expired")
	// ErrNotYetValid: iat is in the future.
	ErrNotYetValid = errors.New("mandate: not yet valid")
	// ErrWrongIssuer: iss is not the issuer the verifier expects.
	ErrWrongIssuer = errors.New("mandate: wrong issuer")
	// ErrUnknownKey: no key of the issuer has the token's kid (rotated out,
	// or never issued by this mesh).
	ErrUnknownKey = errors.New("mandate: unknown issuer key")
	// ErrInvalidClaims: claims given to Issue or Narrow are incomplete or
	// inconsistent.
	ErrInvalidClaims = errors.New("mandate: invalid claims")
	// ErrTooWide: a sub-mandate would grant more than its parent.
	ErrTooWide = errors.New("mandate: sub-mandate is broader than its parent")
	// ErrPolicyRefused: a catalogue's rule (RegisterPolicyCheck) refuses
	// the mandate's policy set.
	ErrPolicyRefused = errors.New("mandate: policy set refused by a catalogue's rule")
	// ErrNoKey: the key file of a project does not exist.
	ErrNoKey = errors.New("mandate: no issuer key")
)

// Header is the JWS protected header.
type Header struct {
	Alg string `json:"alg"`
	Typ string `json:"typ"`
	Kid string `json:"kid"`
}

// Grant is the mandate claim: the agent's authority as Cedar policies.
type Grant struct {
	// RARFormat is always "cedar".
	RARFormat string `json:"rarFormat"`
	// PolicySet is Cedar policy text.
	PolicySet string `json:"policySet"`
}

// Claims are the JWT claims of a mandate.
type Claims struct {
	JTI        string `json:"jti"`
	Issuer     string `json:"iss"`
	Subject    string `json:"sub"`
	IssuedAt   int64  `json:"iat"`
	ExpiresAt  int64  `json:"exp"`
	ATPVersion string `json:"atp_version"`
	// Resource binds the mandate to one resource (a catalogue's entity,
	// e.g. an ATP booking; claim booking_object_id); nil (JSON null) when
	// it is not bound.
	Resource    *string  `json:"booking_object_id"`
	ParentChain []string `json:"parent_chain"`
	AgentPub    string   `json:"agent_pub"`
	Mandate     Grant    `json:"mandate"`
}

// BoundResource returns the id of the bound resource (claim
// booking_object_id), or "".
func (c *Claims) BoundResource() string {
	if c.Resource == nil {
		return ""
	}
	return *c.Resource
}

// Mandate is a decoded token.
type Mandate struct {
	Header Header
	Claims Claims
	// Raw is the compact token.
	Raw string
	// Policies is the parsed mandate.policySet. Policy ids are "policyN"
	// (N counts from 0 in text order) unless an @id("…") annotation names
	// the policy.
	Policies *cedar.PolicySet

	signingInput []byte
	signature    []byte
}

// Expires returns exp as a time.
func (m *Mandate) Expires() time.Time { return time.Unix(m.Claims.ExpiresAt, 0).UTC() }

var b64 = base64.RawURLEncoding

// Decode parses a compact token without verifying its signature. It checks
// the shape, the header (alg EdDSA, typ atp-mandate+jwt), the required
// claims and the Cedar syntax of the policy set.
func Decode(token string) (*Mandate, error) {
	if len(token) > MaxTokenBytes {
		return nil, fmt.Errorf("%w: token is %d bytes, the limit is %d", ErrMalformed, len(token), MaxTokenBytes)
	}
	token = strings.TrimSpace(token)
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, fmt.Errorf("%w: want three base64url parts separated by '.', got %d (pass the whole token, e.g. the content of demo-mandate.jwt)", ErrMalformed, len(parts))
	}
	hb, err := b64.DecodeString(parts[0])
	if err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	cb, err := b64.DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("%w: claims: %v", ErrMalformed, err)
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil {
		return nil, fmt.Errorf("%w: signature: %v", ErrMalformed, err)
	}
	m := &Mandate{Raw: token, signingInput: []byte(parts[0] + "." + parts[1]), signature: sig}
	if err := strictJSON(hb, &m.Header); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	if m.Header.Alg != Algorithm {
		return nil, fmt.Errorf("%w: header alg is %q, only %q is accepted", ErrMalformed, m.Header.Alg, Algorithm)
	}
	if m.Header.Typ != TokenType {
		return nil, fmt.Errorf("%w: header typ is %q, want %q", ErrMalformed, m.Header.Typ, TokenType)
	}
	if len(sig) != ed25519.SignatureSize {
		return nil, fmt.Errorf("%w: signature is %d bytes, an Ed25519 signature is %d", ErrMalformed, len(sig), ed25519.SignatureSize)
	}
	if err := strictJSON(cb, &m.Claims); err != nil {
		return nil, fmt.Errorf("%w: claims: %v", ErrMalformed, err)
	}
	ps, err := checkClaims(&m.Claims)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	m.Policies = ps
	return m, nil
}

// strictJSON decodes one JSON object, refusing trailing data.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// checkClaims validates the required claims and parses the policy set.
func checkClaims(c *Claims) (*cedar.PolicySet, error) {
	switch {
	case c.JTI == "":
		return nil, errors.New("claim jti is empty")
	case c.Issuer == "":
		return nil, errors.New("claim iss is empty")
	case c.Subject == "":
		return nil, errors.New("claim sub (the agent id) is empty")
	case c.IssuedAt <= 0:
		return nil, errors.New("claim iat is missing")
	case c.ExpiresAt <= c.IssuedAt:
		return nil, fmt.Errorf("claim exp (%d) is not after iat (%d)", c.ExpiresAt, c.IssuedAt)
	case c.ATPVersion == "":
		return nil, errors.New("claim atp_version is empty")
	case c.Resource != nil && *c.Resource == "":
		return nil, errors.New(`claim booking_object_id is "", use null for an unbound mandate`)
	case c.Mandate.RARFormat != RARFormat:
		return nil, fmt.Errorf("mandate.rarFormat is %q, want %q", c.Mandate.RARFormat, RARFormat)
	}
	if c.AgentPub != "" {
		k, err := b64.DecodeString(c.AgentPub)
		if err != nil || len(k) != ed25519.PublicKeySize {
			return nil, errors.New("claim agent_pub is not a base64url Ed25519 public key (32 bytes)")
		}
	}
	for i, p := range c.ParentChain {
		if p == "" {
			return nil, fmt.Errorf("parent_chain[%d] is empty", i)
		}
	}
	return ParsePolicies("mandate.policySet", c.Mandate.PolicySet)
}

// ParsePolicies parses Cedar policy text. Policies named by an @id("…")
// annotation get that id; the others "policyN" (N counts from 0 in text
// order). A syntax error names the line and column; so does a duplicate
// @id.
func ParsePolicies(name, text string) (ps *cedar.PolicySet, err error) {
	defer func() {
		if r := recover(); r != nil {
			ps, err = nil, fmt.Errorf("%s: cannot parse: %v", name, r)
		}
	}()
	list, err := cedar.NewPolicyListFromBytes(name, []byte(text))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	ps = cedar.NewPolicySet()
	for i, p := range list {
		id := cedar.PolicyID(fmt.Sprintf("policy%d", i))
		if v, ok := p.Annotations()["id"]; ok && v != "" {
			id = cedar.PolicyID(v)
		}
		if !ps.Add(id, p) {
			pos := p.Position()
			return nil, fmt.Errorf("%s:%d:%d: policy id %q is used twice (give each policy its own @id)", name, pos.Line, pos.Column, id)
		}
	}
	return ps, nil
}

// Issue signs claims with key. Empty jti, iss, iat and atp_version are
// filled in (a fresh UUID, key.Issuer, now, ATPVersion); exp must be set.
// The claims are validated as Decode would, and a policy set a registered
// catalogue rule refuses is refused (CheckPolicies, ErrPolicyRefused).
func Issue(key *IssuerKey, c Claims, now time.Time) (string, error) {
	if key == nil || len(key.Private) != ed25519.PrivateKeySize {
		return "", fmt.Errorf("%w: no signing key", ErrInvalidClaims)
	}
	if c.JTI == "" {
		c.JTI = uuid.NewString()
	}
	if c.Issuer == "" {
		c.Issuer = key.Issuer
	}
	if c.Issuer != key.Issuer {
		return "", fmt.Errorf("%w: iss %q differs from the key's issuer %q", ErrInvalidClaims, c.Issuer, key.Issuer)
	}
	if c.IssuedAt == 0 {
		c.IssuedAt = now.Unix()
	}
	if c.ATPVersion == "" {
		c.ATPVersion = ATPVersion
	}
	if c.Mandate.RARFormat == "" {
		c.Mandate.RARFormat = RARFormat
	}
	if c.ParentChain == nil {
		c.ParentChain = []string{}
	}
	ps, err := checkClaims(&c)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidClaims, err)
	}
	if err := CheckPolicies(ps); err != nil {
		return "", err
	}
	hb, err := json.Marshal(Header{Alg: Algorithm, Typ: TokenType, Kid: key.KID})
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidClaims, err)
	}
	cb, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidClaims, err)
	}
	input := b64.EncodeToString(hb) + "." + b64.EncodeToString(cb)
	sig := ed25519.Sign(key.Private, []byte(input))
	tok := input + "." + b64.EncodeToString(sig)
	if len(tok) > MaxTokenBytes {
		return "", fmt.Errorf("%w: token would be %d bytes, the limit is %d (shorten the policy set)", ErrInvalidClaims, len(tok), MaxTokenBytes)
	}
	return tok, nil
}

// KeyResolver finds the public key an issuer signs with.
type KeyResolver interface {
	// PublicKey returns the key of issuer whose key id is kid. It returns
	// an error wrapping ErrUnknownKey when the issuer has no such key.
	PublicKey(ctx context.Context, issuer, kid string) (ed25519.PublicKey, error)
}

// Verifier verifies tokens.
type Verifier struct {
	// Keys resolves issuer keys. Required.
	Keys KeyResolver
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Leeway is the clock skew tolerated; default DefaultLeeway. Negative
	// means none.
	Leeway time.Duration
}

// Verify decodes token and checks that it was issued by issuer (empty:
// any issuer Keys knows), that its signature verifies, and that it is
// within its validity window.
func (v *Verifier) Verify(ctx context.Context, token, issuer string) (*Mandate, error) {
	m, err := Decode(token)
	if err != nil {
		return nil, err
	}
	if err := v.VerifyDecoded(ctx, m, issuer); err != nil {
		return nil, err
	}
	return m, nil
}

// VerifyDecoded is Verify for a token already decoded.
func (v *Verifier) VerifyDecoded(ctx context.Context, m *Mandate, issuer string) error {
	if issuer != "" && m.Claims.Issuer != issuer {
		return fmt.Errorf("%w: token issued by %q, this project accepts only %q (issue the mandate with this project's key)", ErrWrongIssuer, m.Claims.Issuer, issuer)
	}
	if v.Keys == nil {
		return fmt.Errorf("%w: verifier has no key resolver", ErrUnknownKey)
	}
	pub, err := v.Keys.PublicKey(ctx, m.Claims.Issuer, m.Header.Kid)
	if err != nil {
		return err
	}
	if !ed25519.Verify(pub, m.signingInput, m.signature) {
		return fmt.Errorf("%w: token %s does not verify with %s key %s (forged or altered)", ErrSignature, m.Claims.JTI, m.Claims.Issuer, m.Header.Kid)
	}
	return v.CheckTime(m)
}

// CheckTime checks only the validity window of m.
func (v *Verifier) CheckTime(m *Mandate) error {
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	leeway := v.Leeway
	if leeway == 0 {
		leeway = DefaultLeeway
	} else if leeway < 0 {
		leeway = 0
	}
	t := now()
	if exp := time.Unix(m.Claims.ExpiresAt, 0); !t.Before(exp.Add(leeway)) {
		return fmt.Errorf("%w: token %s expired at %s (issue a new mandate)", ErrExpired, m.Claims.JTI, exp.UTC().Format(time.RFC3339))
	}
	if iat := time.Unix(m.Claims.IssuedAt, 0); t.Add(leeway).Before(iat) {
		return fmt.Errorf("%w: token %s is issued at %s, in the future (check the clocks)", ErrNotYetValid, m.Claims.JTI, iat.UTC().Format(time.RFC3339))
	}
	return nil
}
