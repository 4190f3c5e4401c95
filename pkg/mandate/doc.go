// Package mandate is the ATP mandate: a signed token (a compact JWS, EdDSA
// over Ed25519, header typ "atp-mandate+jwt") that carries an agent's
// authority as a Cedar policy set. The mesh's gate (pkg/authz) verifies it
// on every tool call and authorizes the call against its policies.
//
// # Token
//
// Header: {"alg":"EdDSA","typ":"atp-mandate+jwt","kid":"<issuer key id>"}.
// Claims (Claims): jti, iss, sub (the agent id), iat, exp (Unix seconds),
// atp_version, booking_object_id (a string, or null when the mandate is not
// bound to a booking), parent_chain (the jti values of the mandates this
// one was narrowed from, root first; empty for a root mandate), agent_pub
// (the agent's Ed25519 public key, base64url, may be empty) and
// mandate: {"rarFormat":"cedar","policySet":"<Cedar policy text>"}.
//
// # Issuers and keys
//
// Each project has one issuer: its name is IssuerName(project)
// ("utpmesh:project:<project>") and its key is an Ed25519 key pair stored
// as a PKCS#8 PEM file (KeyDir: <dir>/<project>.pem, mode 0600). The key id
// (kid) is derived from the public key, so a verifier can tell a token
// signed by a rotated-out key from a forged one. Rotation replaces the key
// file: tokens signed by the old key are refused from then on (there is no
// overlap window; see docs/security.md).
//
// # Verification
//
// Verifier.Verify checks, in order: the token's shape (Decode), the issuer
// (the expected project's issuer), the key id, the signature, and the time
// window (iat not in the future beyond Leeway, exp not passed). Each failure
// wraps its own sentinel (ErrMalformed, ErrWrongIssuer, ErrUnknownKey,
// ErrSignature, ErrNotYetValid, ErrExpired) with a message that says what to
// do. Decode alone never checks a signature: use it only to inspect.
//
// # Narrowing
//
// A sub-mandate must be provably no broader than its parent (CheckNarrowing).
// Proving that one Cedar policy set permits no more than another is
// undecidable in general, so the check is sound but deliberately
// conservative: every permit policy of the child must be covered by one
// permit policy of the parent (same or narrower scope, and every condition
// of the parent repeated verbatim), and every forbid policy of the parent
// must appear in the child. A child that is in fact narrower but written
// differently is refused, with the child policy that is too wide named.
// The child's expiry may not exceed the parent's, and a parent bound to a
// booking binds its children to the same booking.
//
// A catalogue may add rules on the policy sets of mandates (PolicyCheck,
// RegisterPolicyCheck; pkg/authz registers those of the catalogues it is
// given): Issue and Narrow refuse a policy set a rule refuses
// (ErrPolicyRefused), and the gate refuses such a token however it was
// signed. ATP's rule (services/atp/atpauthz) is that a mandate permitting
// its escalation action lists the escalations it permits.
package mandate
