//go:build linux

package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/streams"
)

// The child processes of BenchmarkWireRoundTrip are this test binary:
// with UTPMESH_TEST_EXEC=1 it is `utpmesh` (TestMain), with
// UTPMESH_BENCH_HOP=DIR it is the fair hop's server (below). Both read
// UTPMESH_BENCH_NOFSYNC=1 first: the process's fsync(2) calls then return
// success without reaching the kernel (a seccomp filter), which is how
// the benchmark runs the mesh with a JetStream that does not fsync
// before its PubAck (see nofsync). fdatasync(2), which bbolt uses on
// Linux, still reaches the disk.
const (
	envBenchHop     = "UTPMESH_BENCH_HOP"
	envBenchHopAddr = "UTPMESH_BENCH_HOP_ADDR"
	envBenchHopSync = "UTPMESH_BENCH_HOP_SYNC" // "always" (default) or "lazy"
	envBenchNoFsync = "UTPMESH_BENCH_NOFSYNC"
	// envBenchCPUProfile=FILE makes a child profile its CPU from its start
	// until it gets SIGUSR1 (kill -USR1 <pid> while a row runs), then
	// write the profile to FILE: go tool pprof FILE.
	envBenchCPUProfile = "UTPMESH_BENCH_CPUPROFILE"
	hopReadyLine       = "hop ready"
	hopSubject         = "bench.hop"
)

func init() {
	if path := os.Getenv(envBenchCPUProfile); path != "" {
		if err := profileUntilUSR1(path); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", envBenchCPUProfile, err)
			os.Exit(2)
		}
	}
	if os.Getenv(envBenchNoFsync) == "1" {
		if err := nofsync(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s=1: %v\n", envBenchNoFsync, err)
			os.Exit(2)
		}
	}
	if dir := os.Getenv(envBenchHop); dir != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := serveHop(ctx, dir, os.Getenv(envBenchHopAddr), os.Getenv(envBenchHopSync) == "lazy")
		stop()
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench hop: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// profileUntilUSR1 starts the CPU profile that SIGUSR1 ends and writes
// to path.
func profileUntilUSR1(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		<-usr1
		signal.Stop(usr1)
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", envBenchCPUProfile, err)
		}
	}()
	return nil
}

// nofsync installs, on every thread of the process, a seccomp filter that
// answers fsync(2) with success without running it. Go's File.Sync is
// fsync(2); nats-server's file store syncs with it (SyncAlways: after
// every stored message). bbolt commits with fdatasync(2), which the
// filter lets through. So the process's JetStream keeps its SyncAlways
// code path (the message written, then the PubAck) minus the disk flush:
// an emulation of sync_interval left lazy, which the mesh cannot be
// configured for today (pkg/embednats always sets SyncAlways).
func nofsync() error {
	info := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArch, SkipFalse: 3},
		bpf.LoadAbsolute{Off: 0, Size: 4}, // seccomp_data.nr
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(unix.SYS_FSYNC), SkipFalse: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO}, // errno 0: success, nothing done
		bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW},
	}
	raw, err := bpf.Assemble(info)
	if err != nil {
		return fmt.Errorf("assemble filter: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}

// auditArch is the AUDIT_ARCH_* value of the architecture the binary
// was built for (seccomp_data.arch).
var auditArch = func() uint32 {
	switch {
	case unix.SYS_FSYNC == 74 && strconv.IntSize == 64: // amd64
		return unix.AUDIT_ARCH_X86_64
	case unix.SYS_FSYNC == 82 && strconv.IntSize == 64: // arm64
		return unix.AUDIT_ARCH_AARCH64
	}
	return 0 // unknown: the filter matches nothing and fsync runs
}()

// serveHop is the fair durable hop's server side, in a process of its own
// as the mesh's server is in `utpmesh up`: an embedded nats-server
// configured as the mesh's (pkg/embednats: JetStream file store under
// dir/jetstream, SyncAlways unless lazy), one file stream configured as the
// mesh's command stream (limits retention, the same max age and duplicate
// window), a pull consumer with explicit acks as the mesh's tool
// consumers, on the process's own TCP connection as the mesh's worker;
// every message is written to a bbolt file (one fsync'd db.Update) and
// answered on its Reply-To header, then acknowledged.
func serveHop(ctx context.Context, dir, addr string, lazy bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %w", envBenchHopAddr, addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("%s %q: %w", envBenchHopAddr, addr, err)
	}
	cfg := embednats.Config{DataDir: dir, Host: host, Port: p, JetStream: true, ServerName: "hop"}
	if lazy {
		cfg.SyncInterval = 2 * time.Minute // nats-server's default: no fsync before the PubAck
	}
	srv, err := embednats.Start(cfg)
	if err != nil {
		return err
	}
	defer srv.Shutdown(context.Background())
	nc, err := srv.Connect(nats.Name("bench-hop"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "bench_hop", Subjects: []string{hopSubject},
		Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy, MaxAge: streams.CommandMaxAge, Duplicates: streams.DuplicateWindow})
	if err != nil {
		return err
	}
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "hop", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return err
	}
	db, err := bolt.Open(filepath.Join(dir, "hop.db"), 0o600, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists([]byte("k")); return err }); err != nil {
		return err
	}
	sem := make(chan struct{}, 64)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			err := db.Update(func(tx *bolt.Tx) error {
				bk := tx.Bucket([]byte("k"))
				id, _ := bk.NextSequence()
				var key [8]byte
				binary.BigEndian.PutUint64(key[:], id)
				return bk.Put(key[:], msg.Data())
			})
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench hop: bbolt: %v\n", err)
				_ = msg.Nak()
				return
			}
			_ = nc.Publish(msg.Headers().Get("Reply-To"), []byte("ok"))
			_ = msg.Ack()
		}()
	}, jetstream.PullMaxMessages(128))
	if err != nil {
		return err
	}
	defer cc.Stop()
	fmt.Fprintln(os.Stderr, hopReadyLine)
	<-ctx.Done()
	return nil
}

// TestNoFsyncFilter: a process started with UTPMESH_BENCH_NOFSYNC=1 gets
// success from fsync(2) without the kernel running it (fsync of a bad
// descriptor succeeds), while fdatasync(2), bbolt's, still runs (and
// fails on the bad descriptor).
func TestNoFsyncFilter(t *testing.T) {
	if os.Getenv("UTPMESH_BENCH_NOFSYNC_CHILD") == "1" {
		if err := unix.Fsync(-1); err != nil {
			t.Fatalf("fsync(-1) under the filter = %v, want success without the syscall", err)
		}
		if err := unix.Fdatasync(-1); err != unix.EBADF {
			t.Fatalf("fdatasync(-1) under the filter = %v, want EBADF (it must reach the kernel)", err)
		}
		return
	}
	if auditArch == 0 {
		t.Skip("the filter knows amd64 and arm64 only")
	}
	if err := unix.Fsync(-1); err != unix.EBADF {
		t.Fatalf("fsync(-1) without the filter = %v, want EBADF", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestNoFsyncFilter$", "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), envBenchNoFsync+"=1", "UTPMESH_BENCH_NOFSYNC_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child with %s=1: %v\n%s", envBenchNoFsync, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestNoFsyncFilter") {
		t.Fatalf("child with %s=1 did not run the check:\n%s", envBenchNoFsync, out)
	}
}
