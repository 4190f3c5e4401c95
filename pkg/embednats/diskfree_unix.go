//go:build unix

package embednats

import "syscall"

// diskFree is the space an unprivileged writer may still use on the
// filesystem that holds dir.
func diskFree(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return -1, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil //nolint:unconvert // Bsize is int64 on linux, uint32 on darwin
}
