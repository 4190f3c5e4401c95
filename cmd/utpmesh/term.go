package main

import "os"

// statFd reports whether the file descriptor is a character device (a
// terminal, in practice).
func statFd(fd uintptr) (bool, error) {
	f := os.NewFile(fd, "")
	if f == nil {
		return false, os.ErrInvalid
	}
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	return fi.Mode()&os.ModeCharDevice != 0, nil
}
