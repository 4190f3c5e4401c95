//go:build unix

package datalock_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/utpmesh/utpmesh/internal/datalock"
)

func TestSecondAcquireNamesTheHolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data") // created by Acquire
	l, err := datalock.Acquire(dir, "utpmesh up")
	if err != nil {
		t.Fatal(err)
	}
	_, err = datalock.Acquire(dir, "utpmesh worker atlas.tasks")
	var ie *datalock.InUseError
	if !errors.Is(err, datalock.ErrInUse) || !errors.As(err, &ie) {
		t.Fatalf("second Acquire = %v, want ErrInUse", err)
	}
	want := "data directory " + dir + " is in use by pid " + strconv.Itoa(os.Getpid()) + " (utpmesh up, started "
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error = %q, want prefix %q", err, want)
	}
	if ie.Holder == nil || ie.Holder.Command != "utpmesh up" || ie.Holder.Started.IsZero() {
		t.Fatalf("holder = %+v", ie.Holder)
	}
	if h, err := datalock.Read(dir); err != nil || h == nil || h.PID != os.Getpid() {
		t.Fatalf("Read = %+v, %v", h, err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatalf("second Release = %v, want nil (idempotent)", err)
	}
	if h, err := datalock.Read(dir); err != nil || h != nil {
		t.Fatalf("Read after Release = %+v, %v; want an empty LOCK file", h, err)
	}
	l2, err := datalock.Acquire(dir, "utpmesh worker atlas.tasks")
	if err != nil {
		t.Fatalf("Acquire after Release = %v", err)
	}
	defer l2.Release()
}

// A LOCK file that nobody holds open never blocks, whatever it says.
func TestStaleLockFileDoesNotBlock(t *testing.T) {
	tests := []struct{ name, content string }{
		{"dead holder", `{"pid":999999,"host":"gone","command":"utpmesh up","started":"2026-01-02T03:04:05Z"}` + "\n"},
		{"garbage", "not json"},
		{"empty", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, datalock.FileName), []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := datalock.Acquire(dir, "utpmesh up")
			if err != nil {
				t.Fatalf("Acquire over a stale LOCK file = %v", err)
			}
			defer l.Release()
			h, err := datalock.Read(dir)
			if err != nil || h == nil || h.PID != os.Getpid() || h.Command != "utpmesh up" {
				t.Fatalf("LOCK file after Acquire names %+v (%v), want this process", h, err)
			}
		})
	}
}

// A lock held by a file that names nobody (its holder has not written it
// yet) is still in use, with a message that says the holder is unknown.
func TestHeldButUnnamed(t *testing.T) {
	dir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dir, datalock.FileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	_, err = datalock.Acquire(dir, "utpmesh up")
	if !errors.Is(err, datalock.ErrInUse) || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("Acquire = %v, want ErrInUse saying the holder is unknown", err)
	}
}

func TestNoDir(t *testing.T) {
	if _, err := datalock.Acquire("", "x"); err == nil || !strings.Contains(err.Error(), "no data directory") {
		t.Fatalf("Acquire(\"\") = %v", err)
	}
}
