package admit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// KeyFile is the admission key's file name under the data directory.
const KeyFile = "admission.key"

// Key is the mesh node's admission key.
type Key struct {
	// KeyID is mandate.KeyID of Public.
	KeyID   string
	Public  ed25519.PublicKey
	private ed25519.PrivateKey
}

// Sign returns the CG-Admission header value of a, signed with k
// (a.KeyID is set to k's).
func (k *Key) Sign(a utp.Admission) (string, error) {
	a.KeyID = k.KeyID
	return utp.SignAdmission(k.private, a)
}

var b64 = base64.RawURLEncoding

// LoadOrCreateKey reads the admission key from dir/admission.key (the
// Ed25519 seed, base64url), creating it (mode 0600) on first use.
func LoadOrCreateKey(dir string) (*Key, error) {
	path := filepath.Join(dir, KeyFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		seed := make([]byte, ed25519.SeedSize)
		if _, err := rand.Read(seed); err != nil {
			return nil, fmt.Errorf("admit: make admission key: %w", err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("admit: admission key directory: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return LoadOrCreateKey(dir) // made concurrently
		}
		if err != nil {
			return nil, fmt.Errorf("admit: write %s: %w", path, err)
		}
		_, werr := f.Write([]byte(b64.EncodeToString(seed) + "\n"))
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return nil, fmt.Errorf("admit: write %s: %w", path, werr)
		}
		return keyOf(seed), nil
	}
	if err != nil {
		return nil, fmt.Errorf("admit: read %s: %w", path, err)
	}
	seed, err := b64.DecodeString(string(bytes.TrimSpace(data)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%w: %s is not a base64url Ed25519 seed (delete it to have a new key made; commands admitted under the old key then fail verification)", ErrKey, path)
	}
	return keyOf(seed), nil
}

func keyOf(seed []byte) *Key {
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	return &Key{KeyID: mandate.KeyID(pub), Public: pub, private: priv}
}

// KeySet is where the admission public keys of every node of a mesh are
// kept, so that every node and worker verifies every node's admissions.
type KeySet interface {
	// Add publishes a node's public key.
	Add(ctx context.Context, kid string, pub ed25519.PublicKey) error
	// All returns every published key by key id.
	All(ctx context.Context) (map[string]ed25519.PublicKey, error)
}

// LocalKeys is the key set of a single-node mesh: its own key.
type LocalKeys struct {
	mu   sync.Mutex
	keys map[string]ed25519.PublicKey
}

var _ KeySet = (*LocalKeys)(nil)

// Add implements KeySet.
func (l *LocalKeys) Add(_ context.Context, kid string, pub ed25519.PublicKey) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[string]ed25519.PublicKey{}
	}
	l.keys[kid] = pub
	return nil
}

// All implements KeySet.
func (l *LocalKeys) All(context.Context) (map[string]ed25519.PublicKey, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]ed25519.PublicKey, len(l.keys))
	for k, v := range l.keys {
		out[k] = v
	}
	return out, nil
}

// KeysBucket is the JetStream key-value bucket of the replicated key set.
const KeysBucket = "utpmesh_admission_keys"

// KVKeys is the key set of a replicated mesh: a JetStream key-value
// bucket (KeysBucket, kid → base64url public key) with the replicas of
// the mesh's other state, so that each node adds its key once and every
// node reads all of them. It is a bucket of its own rather than an entry
// of the policy store, whose contract (four backends, one conformance
// suite) is about projects' policies.
type KVKeys struct {
	b *jskv.Bucket
}

var _ KeySet = (*KVKeys)(nil)

// OpenKVKeys opens (or creates) the key set's bucket with replicas copies.
func OpenKVKeys(ctx context.Context, js jetstream.JetStream, replicas int) (*KVKeys, error) {
	b, err := jskv.Open(ctx, js, jskv.Config{Bucket: KeysBucket, Replicas: replicas, Description: "utpmesh admission public keys (kid → key)"})
	if err != nil {
		return nil, fmt.Errorf("admit: %w", err)
	}
	return &KVKeys{b: b}, nil
}

// Add implements KeySet.
func (k *KVKeys) Add(ctx context.Context, kid string, pub ed25519.PublicKey) error {
	if _, err := k.b.KV.Put(ctx, kid, []byte(b64.EncodeToString(pub))); err != nil {
		return fmt.Errorf("admit: publish admission key %s: %w", kid, err)
	}
	return nil
}

// All implements KeySet: read from the stream leader, so a key a node
// just added is seen.
func (k *KVKeys) All(ctx context.Context) (map[string]ed25519.PublicKey, error) {
	out := map[string]ed25519.PublicKey{}
	err := k.b.Scan(ctx, ">", func(key string, e jskv.Entry) error {
		if !e.Exists {
			delete(out, key)
			return nil
		}
		pub, err := b64.DecodeString(string(e.Value))
		if err != nil || len(pub) != ed25519.PublicKeySize || mandate.KeyID(pub) != key {
			return fmt.Errorf("%w: bucket %s: key %q holds no Ed25519 public key of that id", ErrKey, KeysBucket, key)
		}
		out[key] = pub
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("admit: read admission keys: %w", err)
	}
	return out, nil
}

// wireKeys renders keys for the keys reply, sorted by key id.
func wireKeys(keys map[string]ed25519.PublicKey) []utp.AdmissionKey {
	out := make([]utp.AdmissionKey, 0, len(keys))
	for kid, pub := range keys {
		out = append(out, utp.AdmissionKey{KeyID: kid, PublicKey: b64.EncodeToString(pub)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].KeyID < out[j].KeyID })
	return out
}
