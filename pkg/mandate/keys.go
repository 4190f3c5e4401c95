package mandate

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/utpmesh/utpmesh/subjects"
)

// IssuerPrefix prefixes a project's issuer name.
const IssuerPrefix = "utpmesh:project:"

// IssuerName is the iss of the mandates a project's key signs.
func IssuerName(project string) string { return IssuerPrefix + project }

// ProjectOfIssuer returns the project of an issuer name, or false.
func ProjectOfIssuer(issuer string) (string, bool) {
	p, ok := strings.CutPrefix(issuer, IssuerPrefix)
	return p, ok && p != ""
}

// IssuerKey is a project's signing key.
type IssuerKey struct {
	// Project the key belongs to.
	Project string
	// Issuer is IssuerName(Project).
	Issuer string
	// KID is KeyID(Public).
	KID string
	// Public and Private are the Ed25519 key pair. Private is nil for a
	// verification-only key.
	Public  ed25519.PublicKey
	Private ed25519.PrivateKey
}

// KeyID derives the kid of a public key: the first 16 base64url characters
// of its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return b64.EncodeToString(sum[:])[:16]
}

// GenerateKey returns a new key for project.
func GenerateKey(project string) (*IssuerKey, error) {
	if err := subjects.ValidateToken("project_id", project); err != nil {
		return nil, fmt.Errorf("mandate: %w", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("mandate: generate key: %w", err)
	}
	return newKey(project, priv), nil
}

func newKey(project string, priv ed25519.PrivateKey) *IssuerKey {
	pub := priv.Public().(ed25519.PublicKey)
	return &IssuerKey{Project: project, Issuer: IssuerName(project), KID: KeyID(pub), Public: pub, Private: priv}
}

// MarshalPEM encodes the private key as PKCS#8 PEM.
func (k *IssuerKey) MarshalPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.Private)
	if err != nil {
		return nil, fmt.Errorf("mandate: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseKeyPEM decodes a PKCS#8 PEM Ed25519 private key of project.
func ParseKeyPEM(project string, data []byte) (*IssuerKey, error) {
	blk, _ := pem.Decode(data)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: key of %s is not a PEM \"PRIVATE KEY\" block", ErrMalformed, project)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: key of %s: %v", ErrMalformed, project, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: key of %s is %T, want an Ed25519 key", ErrMalformed, project, k)
	}
	return newKey(project, priv), nil
}

// KeyDir keeps one issuer key per project in a directory:
// <Dir>/<project>.pem, mode 0600. It is a KeyResolver for the issuers of
// the projects whose keys it holds; keys are read once and cached.
type KeyDir struct {
	Dir string

	mu    sync.Mutex
	cache map[string]*IssuerKey
}

var _ KeyResolver = (*KeyDir)(nil)

// NewKeyDir returns a KeyDir on dir.
func NewKeyDir(dir string) *KeyDir { return &KeyDir{Dir: dir, cache: map[string]*IssuerKey{}} }

// Path is the key file of project.
func (d *KeyDir) Path(project string) string { return filepath.Join(d.Dir, project+".pem") }

// Load reads the key of project; ErrNoKey when it has none.
func (d *KeyDir) Load(ctx context.Context, project string) (*IssuerKey, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := subjects.ValidateToken("project_id", project); err != nil {
		return nil, fmt.Errorf("mandate: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if k, ok := d.cache[project]; ok {
		return k, nil
	}
	data, err := os.ReadFile(d.Path(project))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: project %s has no key at %s (utpmesh up creates one per project)", ErrNoKey, project, d.Path(project))
	}
	if err != nil {
		return nil, fmt.Errorf("mandate: read key: %w", err)
	}
	k, err := ParseKeyPEM(project, data)
	if err != nil {
		return nil, err
	}
	if d.cache == nil {
		d.cache = map[string]*IssuerKey{}
	}
	d.cache[project] = k
	return k, nil
}

// Ensure loads the key of project, creating it when there is none. created
// reports whether a new key was written.
func (d *KeyDir) Ensure(ctx context.Context, project string) (k *IssuerKey, created bool, err error) {
	k, err = d.Load(ctx, project)
	if !errors.Is(err, ErrNoKey) {
		return k, false, err
	}
	k, err = GenerateKey(project)
	if err != nil {
		return nil, false, err
	}
	data, err := k.MarshalPEM()
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(d.Dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("mandate: key directory: %w", err)
	}
	f, err := os.OpenFile(d.Path(project), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		k, err = d.Load(ctx, project) // created concurrently
		return k, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("mandate: create key: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return nil, false, fmt.Errorf("mandate: write key: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return nil, false, fmt.Errorf("mandate: write key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, false, fmt.Errorf("mandate: write key: %w", err)
	}
	d.mu.Lock()
	if d.cache == nil {
		d.cache = map[string]*IssuerKey{}
	}
	d.cache[project] = k
	d.mu.Unlock()
	return k, true, nil
}

// PublicKey implements KeyResolver for IssuerName(project) issuers.
func (d *KeyDir) PublicKey(ctx context.Context, issuer, kid string) (ed25519.PublicKey, error) {
	project, ok := ProjectOfIssuer(issuer)
	if !ok {
		return nil, fmt.Errorf("%w: issuer %q is not a utpmesh project issuer (%sPROJECT)", ErrUnknownKey, issuer, IssuerPrefix)
	}
	k, err := d.Load(ctx, project)
	if errors.Is(err, ErrNoKey) {
		return nil, fmt.Errorf("%w: %v", ErrUnknownKey, err)
	}
	if err != nil {
		return nil, err
	}
	if k.KID != kid {
		return nil, fmt.Errorf("%w: %s signs with key %s, the token names key %q (rotated out, or not issued by this mesh)", ErrUnknownKey, issuer, k.KID, kid)
	}
	return k.Public, nil
}

// StaticKeys is an in-memory KeyResolver.
type StaticKeys []*IssuerKey

var _ KeyResolver = StaticKeys(nil)

// PublicKey implements KeyResolver.
func (s StaticKeys) PublicKey(ctx context.Context, issuer, kid string) (ed25519.PublicKey, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	known := false
	for _, k := range s {
		if k.Issuer == issuer {
			known = true
			if k.KID == kid {
				return k.Public, nil
			}
		}
	}
	if known {
		return nil, fmt.Errorf("%w: %s has no key %q", ErrUnknownKey, issuer, kid)
	}
	return nil, fmt.Errorf("%w: unknown issuer %q", ErrUnknownKey, issuer)
}
