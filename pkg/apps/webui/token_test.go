package webui_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/apps/webui"
)

// TestLoadToken: the token is made once, kept with mode 0600 and read
// back the same; concurrent first starts agree on one token.
func TestLoadToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", webui.TokenFile)
	tok, created, err := webui.LoadToken(path)
	if err != nil || !created || len(tok) < webui.MinTokenLen {
		t.Fatalf("first LoadToken = %q, created %v, %v", tok, created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	again, created, err := webui.LoadToken(path)
	if err != nil || created || again != tok {
		t.Fatalf("second LoadToken = %q, created %v, %v; want %q kept", again, created, err, tok)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("data directory holds %d files, want only %s (no temporary file left)", len(entries), webui.TokenFile)
	}

	fresh := filepath.Join(t.TempDir(), webui.TokenFile)
	var wg sync.WaitGroup
	got := make([]string, 8)
	errs := make([]error, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _, errs[i] = webui.LoadToken(fresh)
		}()
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil || got[i] != got[0] {
			t.Fatalf("concurrent LoadToken %d = %q, %v; want %q", i, got[i], errs[i], got[0])
		}
	}
}

// TestLoadTokenRefuses: a token file others may read, a short one, one
// with two tokens and a directory are refused, naming the file and the fix.
func TestLoadTokenRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		mode    os.FileMode
		dir     bool
		want    string
	}{
		{"readable by others", "0123456789abcdef0123", 0o644, false, "may be read by others (mode 0644); run 'chmod 600 "},
		{"readable by the group", "0123456789abcdef0123", 0o640, false, "may be read by others (mode 0640)"},
		{"short", "short", 0o600, false, "holds 5 characters, not one token of 16 or more; delete it"},
		{"empty", "", 0o600, false, "holds 0 characters"},
		{"two tokens", "0123456789abcdef0123 0123456789abcdef0123", 0o600, false, "not one token"},
		{"directory", "", 0o700, true, "is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), webui.TokenFile)
			if tc.dir {
				if err := os.Mkdir(path, tc.mode); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(path, []byte(tc.content), tc.mode); err != nil {
				t.Fatal(err)
			} else if err := os.Chmod(path, tc.mode); err != nil { // past the umask
				t.Fatal(err)
			}
			tok, _, err := webui.LoadToken(path)
			if !errors.Is(err, webui.ErrTokenFile) || tok != "" || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadToken = %q, %v; want ErrTokenFile naming %s with %q", tok, err, path, tc.want)
			}
		})
	}
}
