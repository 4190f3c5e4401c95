package boltfile_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// BenchmarkPagesThenSync measures what a bbolt commit pays the disk: n
// 4 KiB pages written at scattered offsets of a 64 MiB file, then one
// fdatasync (bbolt syncs its data pages so, then its meta page again).
// docs/performance.md uses it for the cost of each page a commit dirties.
func BenchmarkPagesThenSync(b *testing.B) {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "pages.dat"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	const filePages = 16384
	if err := f.Truncate(filePages * 4096); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	page := make([]byte, 4096)
	for _, n := range []int{1, 4, 17, 34} {
		b.Run(fmt.Sprintf("pages=%d", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				for p := range n {
					if _, err := f.WriteAt(page, int64((i*37+p*101)%filePages)*4096); err != nil {
						b.Fatal(err)
					}
				}
				if err := syscall.Fdatasync(int(f.Fd())); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
