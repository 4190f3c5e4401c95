//go:build !unix

package embednats

import "errors"

// diskFree is not known on this platform: the guard relies on its write
// probe alone.
func diskFree(string) (int64, error) {
	return -1, errors.New("free disk space is not known on this platform")
}
