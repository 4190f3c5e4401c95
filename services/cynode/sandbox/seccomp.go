package sandbox

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"syscall"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// Why github.com/elastic/go-seccomp-bpf: it is pure Go (no libseccomp, no
// cgo), maintained, assembles a policy of syscall names with argument
// conditions for the running architecture (the arch check and the x32
// ABI guard included), and returns golang.org/x/net/bpf instructions,
// which bwrap --seccomp takes as raw struct sock_filter. Writing the
// jumps by hand with golang.org/x/net/bpf alone would repeat what it
// already gets right.

// refusedSyscalls are refused with EPERM in every sandbox: new namespaces
// and joining others (a nested user namespace gives uid 0 and every
// capability inside it), mounts, tracing and reading other processes'
// memory, the kernel keyrings, eBPF and perf, loading kernels and
// modules, swap, reboot, clocks, accounting, quotas, raw I/O ports,
// io_uring (whose operations bypass this filter), userfaultfd and
// open_by_handle_at. Names the running architecture lacks are skipped.
var refusedSyscalls = []string{
	"unshare", "setns",
	"mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
	"keyctl", "add_key", "request_key",
	"bpf", "perf_event_open", "userfaultfd", "fanotify_init", "open_by_handle_at", "name_to_handle_at",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "create_module",
	"swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd", "lookup_dcookie", "nfsservctl", "uselib", "_sysctl",
	"settimeofday", "clock_settime", "clock_adjtime", "stime", "sethostname", "setdomainname", "syslog", "vhangup",
	"iopl", "ioperm",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
}

// cloneNamespaces are the clone(2) flags that create namespaces; a clone
// with any of them is refused (fork and threads pass).
const cloneNamespaces = syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUSER |
	syscall.CLONE_NEWPID | syscall.CLONE_NEWNET | syscall.CLONE_NEWCGROUP

// actionENOSYS answers clone3 "not implemented": its flags sit in memory
// a filter cannot read, and the C library then falls back to clone, whose
// flags the filter checks.
const actionENOSYS = seccomp.Action(uint32(seccomp.ActionErrno) | uint32(syscall.ENOSYS))

var (
	filterOnce sync.Once
	filterProg []byte
	filterErr  error
)

// seccompFilter returns the sandboxes' filter as bwrap --seccomp reads it:
// struct sock_filter entries in the host's byte order.
func seccompFilter() ([]byte, error) {
	filterOnce.Do(func() { filterProg, filterErr = buildFilter() })
	return filterProg, filterErr
}

func buildFilter() ([]byte, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	var names []string
	for _, n := range refusedSyscalls {
		if _, ok := info.SyscallNames[n]; ok {
			names = append(names, n)
		}
	}
	groups := []seccomp.SyscallGroup{{Names: names, Action: seccomp.ActionErrno}}
	if _, ok := info.SyscallNames["clone3"]; ok {
		groups = append(groups, seccomp.SyscallGroup{Names: []string{"clone3"}, Action: actionENOSYS})
	}
	// clone's flags are its first argument on every architecture this
	// library knows but s390x, which the sandbox does not support.
	groups = append(groups, seccomp.SyscallGroup{Action: seccomp.ActionErrno, NamesWithCondtions: []seccomp.NameWithConditions{
		{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNamespaces}}}}})
	policy := seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: groups}
	insns, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	raw, err := bpf.Assemble(insns)
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	return out, nil
}

// seccompFile is a pipe holding the filter, for bwrap --seccomp FD: the
// read end is passed to the sandbox's process, the write end is written
// and closed. The caller closes the returned file after the start.
func seccompFile() (*os.File, error) {
	prog, err := seccompFilter()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	// A filter is a few hundred bytes: the pipe's buffer holds it, so the
	// write does not wait for bwrap.
	_, err = w.Write(prog)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	return r, nil
}
