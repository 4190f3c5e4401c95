package admit_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/admit"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// TestKeyFile: the key is made once (0600) and read back the same; a file
// that holds no seed is refused with what to do.
func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	k1, err := admit.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, admit.KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, fi.Mode())
	}
	k2, err := admit.LoadOrCreateKey(dir)
	if err != nil || k2.KeyID != k1.KeyID || k1.KeyID != mandate.KeyID(k1.Public) {
		t.Fatalf("reloaded key %s (%v), want %s", k2.KeyID, err, k1.KeyID)
	}
	// What it signs verifies under its public key.
	cmd := &utp.Command{AgentID: "a", AgentTurnID: "t", ToolCallID: "c", ToolCallCardID: card.NewID(), AfterExecution: card.Suspend}
	hdr, err := k1.Sign(utp.Admission{Subject: "s", AgentID: "a", AgentTurnID: "t", ToolCallID: "c", ToolCallCardID: cmd.ToolCallCardID, AfterExecution: card.Suspend})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := utp.VerifyAdmission(func(string) (ed25519.PublicKey, error) { return k2.Public, nil }, hdr, "s", cmd); err != nil {
		t.Fatalf("verify: %v", err)
	}

	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, admit.KeyFile), []byte("not a seed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := admit.LoadOrCreateKey(bad); !errors.Is(err, admit.ErrKey) {
		t.Fatalf("bad key file: %v, want ErrKey", err)
	}
}

// TestKeySets: every node's key is in the replicated set (a JetStream
// bucket on a real nats-server), read back by any client; the local set
// holds its own.
func TestKeySets(t *testing.T) {
	ctx := context.Background()
	srv := meshtest.NATS(t)
	js, err := jetstream.New(meshtest.Conn(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	n1, n2 := newKey(t), newKey(t)
	for _, tc := range []struct {
		name string
		open func() (admit.KeySet, admit.KeySet) // two nodes' views
	}{
		{"local", func() (admit.KeySet, admit.KeySet) { l := &admit.LocalKeys{}; return l, l }},
		{"replicated", func() (admit.KeySet, admit.KeySet) {
			a, err := admit.OpenKVKeys(ctx, js, 1)
			if err != nil {
				t.Fatal(err)
			}
			b, err := admit.OpenKVKeys(ctx, js, 1)
			if err != nil {
				t.Fatal(err)
			}
			return a, b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.open()
			if err := a.Add(ctx, n1.KeyID, n1.Public); err != nil {
				t.Fatal(err)
			}
			if err := b.Add(ctx, n2.KeyID, n2.Public); err != nil {
				t.Fatal(err)
			}
			for _, s := range []admit.KeySet{a, b} {
				all, err := s.All(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(all) != 2 || !all[n1.KeyID].Equal(n1.Public) || !all[n2.KeyID].Equal(n2.Public) {
					t.Fatalf("keys = %v, want both nodes'", all)
				}
			}
		})
	}
}

func newKey(t *testing.T) *admit.Key {
	t.Helper()
	k, err := admit.LoadOrCreateKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return k
}
