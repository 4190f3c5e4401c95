// Package atomicfile writes a file so that a reader sees either the old
// content or the whole new one, never an empty or partial file, and the
// new content is on disk when Write returns.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Write writes data to path with perm: to a temporary file in the same
// directory, fsync'd, then renamed over path, and the directory fsync'd.
func Write(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Chmod(perm), f.Sync(), f.Close()); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("atomicfile: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("atomicfile: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	return errors.Join(d.Sync(), d.Close())
}
