package creds_test

import (
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/utpmesh/utpmesh/pkg/creds"
)

func TestNames(t *testing.T) {
	tests := []struct{ got, want string }{
		{creds.AgentName("demo"), "agent-demo"},
		{creds.WorkerName("echo"), "worker-echo"},
		{creds.WorkerName("atlas.tasks"), "worker-atlas_tasks"},
		{creds.SeedPath("d", creds.RoleAdmin), filepath.Join("d", "admin.nk")},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestOption(t *testing.T) {
	dir := t.TempDir()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, path, wantErr string
		notExist            bool // the error also matches fs.ErrNotExist
	}{
		{"seed", write("ok.nk", string(seed)+"\n"), "", false},
		{"not a seed", write("bad.nk", "not a seed\n"), "want an nkey seed", false},
		{"missing", filepath.Join(dir, "missing.nk"), "--creds", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opt, err := creds.Option(tc.path)
			if tc.wantErr == "" {
				if err != nil || opt == nil {
					t.Fatalf("Option = %v, %v", opt, err)
				}
				// The identity's own reply-inbox prefix, the only one the
				// server lets it subscribe to.
				pub, _ := kp.PublicKey()
				o := nats.GetDefaultOptions()
				if err := opt(&o); err != nil || o.InboxPrefix != "_INBOX."+pub || o.Nkey != pub {
					t.Fatalf("Option set inbox prefix %q, nkey %q (%v); want _INBOX.%s", o.InboxPrefix, o.Nkey, err, pub)
				}
				if got, err := creds.PublicKey(tc.path); err != nil || got != pub {
					t.Fatalf("PublicKey = %q, %v; want %s", got, err, pub)
				}
				return
			}
			if !errors.Is(err, creds.ErrCreds) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Option = %v, want ErrCreds mentioning %q", err, tc.wantErr)
			}
			if errors.Is(err, fs.ErrNotExist) != tc.notExist {
				t.Fatalf("Option = %v: errors.Is(fs.ErrNotExist) = %v, want %v", err, !tc.notExist, tc.notExist)
			}
		})
	}
}

// Connect as the agent identity of project demo that a local 'utpmesh up'
// wrote under its data directory.
func ExampleOption() {
	opt, err := creds.Option(creds.SeedPath(creds.DefaultDir, creds.AgentName("demo")))
	if err != nil {
		log.Fatal(err) // no such file: start 'utpmesh up' first, or pass its DATA/creds
	}
	nc, err := nats.Connect(nats.DefaultURL, opt)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	fmt.Println("connected as", creds.AgentName("demo"))
}
