package utp

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// HeaderAdmission is the header of an admitted tool command: the mesh's
// Ed25519 signature over the command's routing fields, written by the
// mesh's admission service after it verified the call's mandate and
// evaluated Cedar (docs/protocol.md, "Admission"). A worker that verifies
// it knows the call was authorized without asking anyone.
const HeaderAdmission = "CG-Admission"

// AdmissionVersion is the v field of the admission claims.
const AdmissionVersion = 1

// Principal kinds: an admitted call was made by an agent
// ("agent:<agent_id>") or by an operator ("operator:<name>").
const (
	PrincipalAgent    = "agent"
	PrincipalOperator = "operator"
)

// OperatorAgentPrefix begins the agent id of an operator's calls
// (OperatorAgentID); the mesh's admission refuses it to agents.
const OperatorAgentPrefix = "op-"

// OperatorAgentID is the agent_id of the calls of the operator name: the
// results of its calls wake cmd.agent.op-<name>.wakeup, the only wakeup
// subject the operator identity may subscribe to. name is a subject token
// (an operator name, e.g. "operator" → "op-operator").
func OperatorAgentID(name string) string { return OperatorAgentPrefix + name }

// ErrAdmission is wrapped by every error of VerifyAdmission and
// Admission.CheckCard: the command's admission is missing, malformed,
// signed by an unknown key, forged, or does not match the command.
var ErrAdmission = errors.New("utp: command not admitted")

// Admission is what the mesh vouches for when it admits a call. Its JSON
// form is the signed part of the CG-Admission header.
type Admission struct {
	// V is AdmissionVersion.
	V int `json:"v"`
	// KeyID names the mesh admission key that signed (mandate.KeyID form:
	// 16 base64url characters of the public key's SHA-256).
	KeyID string `json:"kid"`
	// Subject is the command's subject.
	Subject string `json:"sub"`
	// The command's routing fields, equal to its body's.
	AgentID        string              `json:"agent_id"`
	AgentTurnID    string              `json:"agent_turn_id"`
	TurnEpoch      int64               `json:"turn_epoch"`
	ToolCallID     string              `json:"tool_call_id"`
	ToolCallCardID string              `json:"tool_call_card_id"`
	ToolName       string              `json:"tool_name"`
	AfterExecution card.AfterExecution `json:"after_execution"`
	// Principal is who made the call: "agent:<agent_id>" or
	// "operator:<name>".
	Principal string `json:"principal"`
	// CardSHA256 is the hex SHA-256 of the tool.call card's content (tool
	// name, arguments, target subject) as the mesh wrote and authorized it.
	CardSHA256 string `json:"card_sha256"`
	// MandateJTI is the jti of the mandate that authorized the call, or ""
	// (a project that needs no mandate, an operator).
	MandateJTI string `json:"mandate_jti,omitempty"`
	// IssuedAt is when the mesh admitted the call, Unix milliseconds.
	IssuedAt int64 `json:"iat"`
}

// PrincipalKind returns the kind part of Principal (PrincipalAgent or
// PrincipalOperator) and its name.
func (a *Admission) PrincipalKind() (kind, name string) {
	kind, name, _ = strings.Cut(a.Principal, ":")
	return kind, name
}

// ContentSHA256 is the CardSHA256 of a tool.call card's content.
func ContentSHA256(content []byte) string {
	s := sha256.Sum256(content)
	return hex.EncodeToString(s[:])
}

var b64 = base64.RawURLEncoding

// SignAdmission returns the CG-Admission header value of a: the base64url
// (unpadded) JSON claims, a dot, and the base64url Ed25519 signature of
// the first part's ASCII bytes (the JWS compact shape without a header).
func SignAdmission(priv ed25519.PrivateKey, a Admission) (string, error) {
	if a.V == 0 {
		a.V = AdmissionVersion
	}
	body, err := json.Marshal(a)
	if err != nil {
		return "", fmt.Errorf("utp: encode admission: %w", err)
	}
	payload := b64.EncodeToString(body)
	return payload + "." + b64.EncodeToString(ed25519.Sign(priv, []byte(payload))), nil
}

// AdmissionKeys resolves the mesh's admission public keys by key id.
type AdmissionKeys func(kid string) (ed25519.PublicKey, error)

// VerifyAdmission checks the CG-Admission header value hdr of a command
// received on subject with body cmd: the signature verifies under the key
// its kid names, and every routing field equals the command's. It does
// not check the card (see CheckCard). Errors wrap ErrAdmission, except a
// key lookup failure, which is returned wrapped as it is (the caller may
// retry later).
func VerifyAdmission(keys AdmissionKeys, hdr, subject string, cmd *Command) (*Admission, error) {
	a, payload, sig, err := decodeAdmission(hdr)
	if err != nil {
		return nil, err
	}
	pub, err := keys(a.KeyID)
	if err != nil {
		return nil, fmt.Errorf("utp: admission key %q: %w", a.KeyID, err)
	}
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, []byte(payload), sig) {
		return nil, fmt.Errorf("%w: the %s signature does not verify under key %s", ErrAdmission, HeaderAdmission, a.KeyID)
	}
	if err := a.match(subject, cmd); err != nil {
		return nil, err
	}
	return a, nil
}

// CheckOwnAdmission is VerifyAdmission for a header value the calling
// process signed itself and kept (e.g. a mesh process whose worker runs a
// command its own admission service published): it decodes hdr and
// checks the routing fields but not the signature. Any other header must
// go through VerifyAdmission.
func CheckOwnAdmission(hdr, subject string, cmd *Command) (*Admission, error) {
	a, _, _, err := decodeAdmission(hdr)
	if err != nil {
		return nil, err
	}
	if err := a.match(subject, cmd); err != nil {
		return nil, err
	}
	return a, nil
}

// decodeAdmission splits and decodes a CG-Admission header value.
func decodeAdmission(hdr string) (*Admission, string, []byte, error) {
	if hdr == "" {
		return nil, "", nil, fmt.Errorf("%w: the command has no %s header (dispatch calls through the mesh: svc.dispatch)", ErrAdmission, HeaderAdmission)
	}
	payload, sig64, ok := strings.Cut(hdr, ".")
	if !ok {
		return nil, "", nil, fmt.Errorf("%w: %s is not <claims>.<signature>", ErrAdmission, HeaderAdmission)
	}
	body, err := b64.DecodeString(payload)
	if err != nil {
		return nil, "", nil, fmt.Errorf("%w: %s claims: %v", ErrAdmission, HeaderAdmission, err)
	}
	sig, err := b64.DecodeString(sig64)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, "", nil, fmt.Errorf("%w: %s signature is not %d base64url bytes", ErrAdmission, HeaderAdmission, ed25519.SignatureSize)
	}
	var a Admission
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&a); err != nil {
		return nil, "", nil, fmt.Errorf("%w: %s claims: %v", ErrAdmission, HeaderAdmission, err)
	}
	if a.V != AdmissionVersion {
		return nil, "", nil, fmt.Errorf("%w: admission version %d (want %d)", ErrAdmission, a.V, AdmissionVersion)
	}
	return &a, payload, sig, nil
}

// match checks that a's routing fields are the command's.
func (a *Admission) match(subject string, cmd *Command) error {
	for _, f := range []struct {
		name       string
		got, wantV any
	}{
		{"subject", a.Subject, subject},
		{"agent_id", a.AgentID, cmd.AgentID},
		{"agent_turn_id", a.AgentTurnID, cmd.AgentTurnID},
		{"turn_epoch", a.TurnEpoch, cmd.TurnEpoch},
		{"tool_call_id", a.ToolCallID, cmd.ToolCallID},
		{"tool_call_card_id", a.ToolCallCardID, cmd.ToolCallCardID},
		{"after_execution", a.AfterExecution, cmd.AfterExecution},
	} {
		if f.got != f.wantV {
			return fmt.Errorf("%w: %s %v differs from the admitted %v", ErrAdmission, f.name, f.wantV, f.got)
		}
	}
	if cmd.ToolName != "" && cmd.ToolName != a.ToolName {
		return fmt.Errorf("%w: tool_name %q differs from the admitted %q", ErrAdmission, cmd.ToolName, a.ToolName)
	}
	return nil
}

// CheckCard checks that the tool.call card's content is the one the mesh
// admitted (CardSHA256).
func (a *Admission) CheckCard(content []byte) error {
	if got := ContentSHA256(content); got != a.CardSHA256 {
		return fmt.Errorf("%w: the tool.call card's content (sha256 %s) is not the admitted one (%s)", ErrAdmission, got, a.CardSHA256)
	}
	return nil
}

// AdmittedAt returns IssuedAt as a time.
func (a *Admission) AdmittedAt() time.Time { return time.UnixMilli(a.IssuedAt).UTC() }
