// Package datalock gives one process at a time a data directory: Acquire
// takes an exclusive flock(2) on <dir>/LOCK and writes who holds it (pid,
// host, command, start time) into the file, so a second process learns at
// once which process is in its way instead of timing out on one of the
// directory's bbolt files.
//
// The lock belongs to the open file: it is released by Release and by the
// holder's exit, however it ends (a SIGKILL included). A LOCK file left by
// a process that is gone is therefore stale and never blocks; its text is
// only read to name the holder of a lock that is actually held. The file
// is not removed on release (removing it would let two processes lock two
// different files of the same name); Release empties it.
//
// Two Acquire calls on one directory in one process conflict too (flock
// locks belong to the open file description, not the process).
//
// Caveat: on systems without flock (not unix) Acquire records the holder
// but does not exclude anyone; bbolt's own file locks remain the guard.
package datalock

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// FileName is the name of the lock file inside a data directory.
const FileName = "LOCK"

// ErrInUse: another open lock holds the data directory. The error is an
// *InUseError naming the holder when its LOCK file says who it is.
var ErrInUse = errors.New("data directory is in use")

// Holder is what a LOCK file records about the process that holds it.
type Holder struct {
	// PID is the holder's process id.
	PID int `json:"pid"`
	// Host is the holder's host name.
	Host string `json:"host"`
	// Command says what the holder runs, e.g. "utpmesh up".
	Command string `json:"command"`
	// Started is when the holder took the lock (UTC).
	Started time.Time `json:"started"`
}

// InUseError reports a data directory held by another lock.
type InUseError struct {
	// Dir is the data directory as the caller named it.
	Dir string
	// Holder is the holder the LOCK file names; nil when it names none
	// (the holder has not written it yet, or it is unreadable).
	Holder *Holder
}

// Error says which process holds the directory, when known.
func (e *InUseError) Error() string {
	h := e.Holder
	if h == nil {
		return fmt.Sprintf("data directory %s is in use by another process (its %s file does not name it yet)", e.Dir, FileName)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "data directory %s is in use by pid %d", e.Dir, h.PID)
	if me, _ := os.Hostname(); h.Host != "" && h.Host != me {
		fmt.Fprintf(&b, " on host %s", h.Host)
	}
	var what []string
	if h.Command != "" {
		what = append(what, h.Command)
	}
	if !h.Started.IsZero() {
		what = append(what, "started "+h.Started.UTC().Format(time.RFC3339))
	}
	if len(what) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(what, ", "))
	}
	return b.String()
}

// Is makes errors.Is(err, ErrInUse) true.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// Lock is a held data-directory lock.
type Lock struct {
	f    *os.File
	path string
}

// Acquire creates dir if needed and takes its lock for command (what the
// process runs, recorded in the LOCK file). It fails at once, without
// waiting, with an *InUseError when another lock holds dir.
func Acquire(dir, command string) (*Lock, error) {
	if dir == "" {
		return nil, errors.New("datalock: no data directory given")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: open lock file: %w", dir, err)
	}
	held, err := tryLock(f)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("data directory %s: lock %s: %w", dir, path, err)
	}
	if !held {
		e := &InUseError{Dir: dir, Holder: readHolder(f)}
		_ = f.Close()
		return nil, e
	}
	host, _ := os.Hostname()
	h := Holder{PID: os.Getpid(), Host: host, Command: command, Started: time.Now().UTC().Truncate(time.Second)}
	if err := write(f, &h); err != nil {
		_ = f.Close() // releases the lock
		return nil, fmt.Errorf("data directory %s: write %s: %w", dir, path, err)
	}
	return &Lock{f: f, path: path}, nil
}

// Path is the lock file's path.
func (l *Lock) Path() string { return l.path }

// Release empties the LOCK file and releases the lock. It is idempotent.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	terr := f.Truncate(0)
	if err := f.Close(); err != nil {
		return fmt.Errorf("datalock: release %s: %w", l.path, err)
	}
	if terr != nil {
		return fmt.Errorf("datalock: empty %s: %w", l.path, terr)
	}
	return nil
}

// Read returns the holder a data directory's LOCK file names, without
// taking the lock; nil when the file is missing or empty. The holder may
// be gone: only Acquire tells whether the lock is held.
func Read(dir string) (*Holder, error) {
	f, err := os.Open(filepath.Join(dir, FileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readHolder(f), nil
}

func readHolder(f *os.File) *Holder {
	buf := make([]byte, 4096)
	n, _ := f.ReadAt(buf, 0)
	var h Holder
	if n == 0 || json.Unmarshal(buf[:n], &h) != nil || h.PID == 0 {
		return nil
	}
	return &h
}

func write(f *os.File, h *Holder) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err = f.WriteAt(append(b, '\n'), 0)
	return err
}
