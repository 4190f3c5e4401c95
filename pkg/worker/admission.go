package worker

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// AdmissionVerifier checks that a command was admitted by the mesh
// (docs/protocol.md, "Admission"). A Runtime with an Authorizer verifies
// every command with one (Config.Admissions; default NewAdmissionVerifier
// on the runtime's connection) and runs the Authorizer only on a command
// without a valid admission in a project that accepts raw commands.
type AdmissionVerifier interface {
	// Verify checks the command's CG-Admission header hdr (received on
	// subj with body cmd): signature and routing fields. An error wrapping
	// utp.ErrAdmission means the command is not admitted; any other error
	// means it could not be checked now (retry later).
	Verify(ctx context.Context, subj subjects.Subject, hdr string, cmd *utp.Command) (*utp.Admission, error)
	// RawCommands reports whether subj's project accepts commands the mesh
	// did not admit (a raw-mode project, or a mesh without an admission
	// service); the worker then runs its Authorizer on them.
	RawCommands(ctx context.Context, subj subjects.Subject) (bool, error)
}

// Admission key fetching: at most one fetch of svc.dispatch.keys per
// keyRefetch (an unknown kid within it is retried later, not refused);
// a project's commands mode is reused for modeTTL.
const (
	keyRefetch   = time.Second
	modeTTL      = 5 * time.Second
	fetchTimeout = 5 * time.Second
)

// errKeyRateLimited: an unknown key id arrived within keyRefetch of the
// last fetch; the command is retried later.
var errKeyRateLimited = errors.New("worker: unknown admission key id; keys were fetched less than a second ago, retrying later")

// NATSAdmissions is the AdmissionVerifier of a worker: it reads the mesh's
// admission public keys and each project's commands mode on
// cg.<ver>.<project>.<channel>.svc.dispatch.keys, caches them, and
// re-reads the keys when a command names an unknown key id (at most once
// a second). A mesh with no admission service (no responders) admits
// nothing: every command counts as raw and the Authorizer decides.
type NATSAdmissions struct {
	// Own, when set, reports whether this process signed a header itself
	// (the mesh process's own admission, admit.Service.Signed): such a
	// header's fields are checked without verifying its signature again.
	Own func(hdr string) bool

	nc  *nats.Conn
	log *slog.Logger

	mu        sync.Mutex
	keys      map[string]ed25519.PublicKey
	fetchedAt time.Time
	modes     map[string]modeEntry // by project
	noService bool
}

type modeEntry struct {
	raw bool
	at  time.Time
}

var _ AdmissionVerifier = (*NATSAdmissions)(nil)

// NewAdmissionVerifier returns the NATS admission verifier on nc.
func NewAdmissionVerifier(nc *nats.Conn, log *slog.Logger) *NATSAdmissions {
	if log == nil {
		log = slog.Default()
	}
	return &NATSAdmissions{nc: nc, log: log, keys: map[string]ed25519.PublicKey{}, modes: map[string]modeEntry{}}
}

// Verify implements AdmissionVerifier.
func (a *NATSAdmissions) Verify(ctx context.Context, subj subjects.Subject, hdr string, cmd *utp.Command) (*utp.Admission, error) {
	if a.Own != nil && hdr != "" && a.Own(hdr) {
		return utp.CheckOwnAdmission(hdr, subj.String(), cmd)
	}
	return utp.VerifyAdmission(func(kid string) (ed25519.PublicKey, error) { return a.key(ctx, subj, kid) }, hdr, subj.String(), cmd)
}

// key returns the public key kid, fetching the keys when it is unknown.
func (a *NATSAdmissions) key(ctx context.Context, subj subjects.Subject, kid string) (ed25519.PublicKey, error) {
	a.mu.Lock()
	pub, ok := a.keys[kid]
	recent := time.Since(a.fetchedAt) < keyRefetch
	a.mu.Unlock()
	if ok {
		return pub, nil
	}
	if recent {
		return nil, errKeyRateLimited
	}
	if _, err := a.fetch(ctx, subj); err != nil {
		return nil, err
	}
	a.mu.Lock()
	pub, ok = a.keys[kid]
	noService := a.noService
	a.mu.Unlock()
	if !ok {
		if noService {
			return nil, fmt.Errorf("%w: the mesh has no admission service (nothing answers svc.dispatch.keys)", utp.ErrAdmission)
		}
		return nil, fmt.Errorf("%w: key %s is not one of the mesh's admission keys", utp.ErrAdmission, kid)
	}
	return pub, nil
}

// RawCommands implements AdmissionVerifier.
func (a *NATSAdmissions) RawCommands(ctx context.Context, subj subjects.Subject) (bool, error) {
	a.mu.Lock()
	m, ok := a.modes[subj.Project]
	a.mu.Unlock()
	if ok && time.Since(m.at) < modeTTL {
		return m.raw, nil
	}
	return a.fetch(ctx, subj)
}

// fetch reads svc.dispatch.keys in subj's project and returns the
// project's raw mode.
func (a *NATSAdmissions) fetch(ctx context.Context, subj subjects.Subject) (bool, error) {
	ks, err := subjects.DispatchKeys(subj.Version, subj.Project, subj.Channel)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	var reply utp.AdmissionKeysReply
	err = svc.Call(ctx, a.nc, ks.String(), nil, struct{}{}, &reply)
	now := time.Now()
	if errors.Is(err, svc.ErrUnavailable) && a.nc.IsConnected() {
		a.mu.Lock()
		first := !a.noService
		a.noService, a.fetchedAt = true, now
		a.modes[subj.Project] = modeEntry{raw: true, at: now}
		a.mu.Unlock()
		if first {
			a.log.Warn("the mesh has no admission service (nothing answers svc.dispatch.keys): commands are checked by the worker's Authorizer alone")
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("worker: read the mesh's admission keys: %w", err)
	}
	keys := make(map[string]ed25519.PublicKey, len(reply.Keys))
	for _, k := range reply.Keys {
		pub, err := base64.RawURLEncoding.DecodeString(k.PublicKey)
		if err != nil || len(pub) != ed25519.PublicKeySize {
			return false, fmt.Errorf("worker: svc.dispatch.keys: key %s is not a base64url Ed25519 public key", k.KeyID)
		}
		keys[k.KeyID] = pub
	}
	raw := reply.Commands == "raw"
	a.mu.Lock()
	a.keys, a.fetchedAt, a.noService = keys, now, false
	a.modes[subj.Project] = modeEntry{raw: raw, at: now}
	a.mu.Unlock()
	return raw, nil
}

// authorize decides whether c may run and reports false when the job has
// ended (failed or left for a retry). A runtime without an Authorizer and
// without Config.Admissions runs every call. Otherwise a command with a
// valid admission (signature, routing fields, card content) runs without
// the Authorizer; one without runs through the Authorizer when its project
// accepts raw commands, else it fails auth_failed.
func (j *job) authorize(ctx context.Context, c *Call, callCard *card.Card) bool {
	r := j.r
	c.Principal = utp.PrincipalAgent + ":" + j.cmd.AgentID
	rawMandate(c, callCard)
	az := r.cfg.Authorizer
	if r.admissions == nil {
		// No verification (a mesh without authorization): the mandate the
		// command carries is passed on when it is the card's.
		if err := j.admittedMandate(c, callCard); err != nil {
			r.log.Debug("the command's mandate is not the card's; not passed to the tool", append(j.logAttrs(), "err", err)...)
		}
		return j.runAuthorizer(ctx, az, c, callCard)
	}
	a, err := r.admissions.Verify(ctx, j.subj, j.msg.Headers().Get(utp.HeaderAdmission), j.cmd)
	if err == nil {
		err = a.CheckCard(callCard.Content)
	}
	if err == nil {
		err = j.admittedMandate(c, callCard)
	}
	if err == nil {
		c.Admission, c.Principal = a, a.Principal
		return true
	}
	if !errors.Is(err, utp.ErrAdmission) {
		j.retryLater("verify admission", err)
		return false
	}
	raw, rerr := r.admissions.RawCommands(ctx, j.subj)
	if rerr != nil {
		j.retryLater("read the project's commands mode", rerr)
		return false
	}
	if !raw {
		j.fail(card.StatusFailed, card.CodeAuthFailed,
			fmt.Sprintf("not admitted by the mesh: dispatch through svc.dispatch (agent.Client.Call), or opt project %s into raw commands (utpmesh policy config --project %s --commands raw): %v",
				j.subj.Project, j.subj.Project, err), nil, callCard)
		return false
	}
	return j.runAuthorizer(ctx, az, c, callCard)
}

// admittedMandate sets c.Mandate from the admitted command's CG-Mandate
// header, which must be the mandate whose SHA-256 the mesh recorded on the
// card; for tools written against the card's metadata.mandate, the
// handler's copy of the card (never the stored one) carries it too.
func (j *job) admittedMandate(c *Call, callCard *card.Card) error {
	tok := j.msg.Headers().Get(utp.HeaderMandate)
	if tok == "" {
		return nil
	}
	var want string
	_ = json.Unmarshal(callCard.Metadata.Extra[metadataMandateSHA256], &want)
	sum := sha256.Sum256([]byte(tok))
	if want == "" || hex.EncodeToString(sum[:]) != want {
		return fmt.Errorf("%w: the %s header is not the mandate the tool.call card records", utp.ErrAdmission, utp.HeaderMandate)
	}
	c.Mandate = tok
	cp := *callCard
	cp.Metadata.Extra = make(map[string]json.RawMessage, len(callCard.Metadata.Extra)+1)
	for k, v := range callCard.Metadata.Extra {
		cp.Metadata.Extra[k] = v
	}
	cp.Metadata.Extra[metadataMandate], _ = json.Marshal(tok)
	c.CallCard = &cp
	return nil
}

// Card metadata keys of the mandate: a raw command's token, an admitted
// call's SHA-256 (docs/protocol.md, "Admission").
const (
	metadataMandate       = "mandate"
	metadataMandateSHA256 = "mandate_sha256"
)

// rawMandate sets c.Mandate from a raw command's card.
func rawMandate(c *Call, callCard *card.Card) {
	if raw, ok := callCard.Metadata.Extra[metadataMandate]; ok {
		_ = json.Unmarshal(raw, &c.Mandate)
	}
}

// runAuthorizer runs az (when set) on c; false when the job has ended.
func (j *job) runAuthorizer(ctx context.Context, az Authorizer, c *Call, callCard *card.Card) bool {
	if az == nil {
		return true
	}
	if err := az.Authorize(ctx, c); err != nil {
		var ce *card.Error
		if errors.As(err, &ce) {
			j.fail(card.StatusFailed, ce.Code, ce.Message, ce.Detail, callCard)
		} else {
			j.retryLater("authorize", err)
		}
		return false
	}
	return true
}
