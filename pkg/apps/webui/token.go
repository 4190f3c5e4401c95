package webui

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TokenFile is the file of a data directory that keeps the UI's access
// token across restarts ('utpmesh up' reads it, LoadToken).
const TokenFile = "ui-token"

// MinTokenLen is the shortest access token the UI accepts.
const MinTokenLen = 16

// ErrTokenFile: a token file is not fit to keep a secret (readable by
// others, a directory) or holds no usable token. The message says what to
// do instead.
var ErrTokenFile = errors.New("webui: unusable token file")

// LoadToken returns the access token kept in path. When path does not
// exist it makes one (NewToken), writes it with mode 0600 and reports
// created; the file appears whole or not at all (a temporary file linked
// into place), so two processes starting at once read the same token.
// A file that others may read (any group or other permission bit) or
// that holds fewer than MinTokenLen characters is refused with
// ErrTokenFile: the error names the file and the command that fixes it.
// Deleting the file and restarting is how the token is rotated.
func LoadToken(path string) (token string, created bool, err error) {
	token, err = readToken(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return token, false, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", false, fmt.Errorf("webui: token file %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return "", false, fmt.Errorf("webui: token file %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	token = NewToken()
	_, werr := tmp.WriteString(token + "\n")
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return "", false, fmt.Errorf("webui: token file %s: %w", path, werr)
	}
	// CreateTemp made it 0600; Link fails when another process won.
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		token, err = readToken(path)
		return token, false, err
	} else if err != nil {
		return "", false, fmt.Errorf("webui: token file %s: %w", path, err)
	}
	return token, true, nil
}

// readToken reads and checks an existing token file.
func readToken(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	switch {
	case fi.IsDir():
		return "", fmt.Errorf("%w: %s is a directory; remove it, and a new token is made at the next start", ErrTokenFile, path)
	case fi.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("%w: %s may be read by others (mode %04o); run 'chmod 600 %s', or delete it for a new token", ErrTokenFile, path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("webui: token file %s: %w", path, err)
	}
	token := strings.TrimSpace(string(b))
	if len(token) < MinTokenLen || strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("%w: %s holds %d characters, not one token of %d or more; delete it, and a new token is made at the next start", ErrTokenFile, path, len(token), MinTokenLen)
	}
	return token, nil
}
