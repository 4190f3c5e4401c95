// Package tmpfstest gives the disk-full tests a small volume of their own:
// a size-capped tmpfs mounted under the test's temporary directory, and a
// filler that takes its last free byte. Mounting needs root
// (CAP_SYS_ADMIN); elsewhere the test is skipped and the skip says why.
package tmpfstest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Mount mounts a tmpfs of size bytes for the test, unmounted when it ends,
// and returns its path. Without root, or where mount is refused, it skips
// the test and says why.
func Mount(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a size-capped tmpfs (run the tests as root, e.g. in the CI container)")
	}
	dir := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.FormatInt(size, 10), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s): the disk-full tests need CAP_SYS_ADMIN", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// Fill writes a file in dir until its filesystem has no byte left (it
// fails the test if the first error is not ENOSPC) and returns the file's
// name: removing it frees the volume again.
func Fill(t testing.TB, dir string) string {
	t.Helper()
	name := filepath.Join(dir, "filler")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	if _, err := f.Write(buf); err != nil && !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("filler: %v, want ENOSPC", err)
	}
	for chunk := len(buf); chunk > 0; chunk /= 2 { // to the brim
		for {
			if _, err := f.Write(buf[:chunk]); err != nil {
				if !strings.Contains(err.Error(), "no space left") {
					t.Fatalf("filler: %v, want ENOSPC", err)
				}
				break
			}
		}
	}
	return name
}
