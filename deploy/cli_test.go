package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/datalock"
)

// cliBin is the utpmesh binary TestMain builds from this checkout.
var cliBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "utpmesh-deploy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cliBin = filepath.Join(dir, "utpmesh")
	build := exec.Command(goTool(), "build", "-o", cliBin, "./cmd/utpmesh")
	build.Dir = ".." // the module root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "deploy: go build ./cmd/utpmesh: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// goTool is the go command running these tests.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// cmdline is one utpmesh command line found in the deployment material.
type cmdline struct {
	// src says where it was found, for messages.
	src string
	// argv is what follows "utpmesh": the subcommand and its arguments.
	argv []string
	// env is the environment the deployment gives it (systemd's
	// EnvironmentFile), used for flag defaults such as $NATS_CREDS.
	env map[string]string
}

func (c cmdline) String() string { return c.src + ": utpmesh " + strings.Join(c.argv, " ") }

// run runs the built CLI with args and env and returns its exit code and output.
func run(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cliBin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Dir = t.TempDir()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("utpmesh %s: still running after 30 s; stderr:\n%s", strings.Join(args, " "), errb.String())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("utpmesh %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errb.String()
}

// flagSpec is what 'utpmesh CMD --help' says about CMD's flags.
type flagSpec struct {
	// takesValue: the flag has a type in the help (not a bool).
	takesValue map[string]bool
	// services are the tool services 'worker --help' lists.
	services []string
}

var (
	specMu sync.Mutex
	specs  = map[string]*flagSpec{}
)

// specOf parses 'utpmesh CMD --help' of the real CLI.
func specOf(t *testing.T, cmd string) *flagSpec {
	t.Helper()
	specMu.Lock()
	defer specMu.Unlock()
	if s, ok := specs[cmd]; ok {
		return s
	}
	code, out, errOut := run(t, nil, cmd, "--help")
	if code != 0 {
		t.Fatalf("utpmesh %s --help: exit %d: %s", cmd, code, errOut)
	}
	s := &flagSpec{takesValue: map[string]bool{}}
	for _, line := range strings.Split(out, "\n") {
		// "  --name type" (or "  -name type" as Go's flag package prints it)
		if rest, ok := strings.CutPrefix(line, "  -"); ok {
			f := strings.Fields(strings.TrimPrefix(rest, "-"))
			s.takesValue[f[0]] = len(f) > 1
		}
		if _, list, ok := strings.Cut(line, "(services: "); ok {
			list, _, _ = strings.Cut(list, ")")
			s.services = strings.Split(list, ", ")
		}
	}
	specs[cmd] = s
	return s
}

// positional returns the arguments of argv (after the subcommand) that
// are not flags or flag values.
func positional(t *testing.T, argv []string) []string {
	t.Helper()
	s := specOf(t, argv[0])
	var pos []string
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if a == "--" {
			return append(pos, argv[i+1:]...)
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if s.takesValue[name] {
			i++
		}
	}
	return pos
}

// flagValue returns the value of --name in argv, and whether it is there.
func flagValue(argv []string, name string) (string, bool) {
	for i, a := range argv {
		for _, p := range []string{"--" + name, "-" + name} {
			if a == p && i+1 < len(argv) {
				return argv[i+1], true
			}
			if v, ok := strings.CutPrefix(a, p+"="); ok {
				return v, true
			}
		}
	}
	return "", false
}

// setFlag returns argv with --name's value replaced by v (appended when absent).
func setFlag(argv []string, name, v string) []string {
	out := slices.Clone(argv)
	for i, a := range out {
		if (a == "--"+name || a == "-"+name) && i+1 < len(out) {
			out[i+1] = v
			return out
		}
		if strings.HasPrefix(a, "--"+name+"=") || strings.HasPrefix(a, "-"+name+"=") {
			out[i] = "--" + name + "=" + v
			return out
		}
	}
	return append(out[:1:1], append([]string{"--" + name, v}, out[1:]...)...)
}

// checkParses reports the problems of parseProblems as test errors.
func checkParses(t *testing.T, c cmdline) {
	t.Helper()
	for _, p := range parseProblems(t, c) {
		t.Error(p)
	}
}

// parseProblems runs the real CLI's flag parser over c: 'utpmesh ARGV
// --help' exits 0 only when every flag before --help exists and its value
// has the flag's type. A worker's services must be ones the CLI knows.
func parseProblems(t *testing.T, c cmdline) (problems []string) {
	t.Helper()
	errorf := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	code, _, errOut := run(t, c.env, append(slices.Clone(c.argv), "--help")...)
	if code != 0 {
		errorf("%s\n  the CLI refuses it (exit %d): %s", c, code, strings.TrimSpace(errOut))
		return problems
	}
	if c.argv[0] == "worker" {
		known := specOf(t, "worker").services
		pos := positional(t, c.argv)
		if len(pos) == 0 {
			errorf("%s\n  names no tool service (known: %s)", c, strings.Join(known, ", "))
		}
		for _, s := range pos {
			if !slices.Contains(known, s) {
				errorf("%s\n  unknown tool service %q (known: %s)", c, s, strings.Join(known, ", "))
			}
		}
	}
	return problems
}

// rootPaths returns argv and env with every absolute path (a value
// starting with "/") moved under root, where the test lays out the files
// the deployment provides.
func rootPaths(root string, c cmdline) cmdline {
	move := func(v string) string {
		if strings.HasPrefix(v, "/") {
			return filepath.Join(root, v)
		}
		return v
	}
	out := cmdline{src: c.src, env: map[string]string{}}
	for _, a := range c.argv {
		if name, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(name, "-") {
			out.argv = append(out.argv, name+"="+move(v))
			continue
		}
		out.argv = append(out.argv, move(a))
	}
	for k, v := range c.env {
		out.env[k] = move(v)
	}
	return out
}

// startProblems runs an 'up' or 'worker' command line for real, with its
// files laid out under root (see rootPaths), as far as the checks a start
// makes before it opens anything: 'up' validates its flags against each
// other (cluster, state, services, limits, the route secret file) and then
// finds its data directory locked by this test; 'worker' validates its
// services and flags, finds its data directory locked (services that keep
// files) or else reads a --creds file the test made unreadable on purpose
// (after checking that the real one exists). Reaching that point, and not
// an earlier error, is the pass.
// checkStarts reports the problems of startProblems as test errors.
func checkStarts(t *testing.T, root string, c cmdline) {
	t.Helper()
	for _, p := range startProblems(t, root, c) {
		t.Error(p)
	}
}

func startProblems(t *testing.T, root string, c cmdline) (problems []string) {
	t.Helper()
	errorf := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	c = rootPaths(root, c)
	argv := c.argv
	// Addresses are checked for being free before the lock: any port.
	for _, f := range []string{"ui-listen", "metrics-addr"} {
		if v, ok := flagValue(argv, f); ok && v != "" {
			argv = setFlag(argv, f, "127.0.0.1:0")
		}
	}
	data, ok := flagValue(argv, "data")
	if !ok && argv[0] == "up" {
		errorf("%s\n  has no --data: a node's data directory must be named (and be a volume)", c)
		return problems
	}
	if ok {
		lock, err := datalock.Acquire(data, "deploy test")
		if err != nil {
			t.Fatalf("%s: lock %s: %v", c, data, err)
		}
		defer func() { _ = lock.Release() }()
	}
	switch argv[0] {
	case "up":
		// What the start reads only after the lock: the shared files.
		for f, want := range map[string][]string{"creds-dir": {"core.nk", "admin.nk", "agent-demo.nk"}, "keys-dir": {"demo.pem"}} {
			dir, ok := flagValue(argv, f)
			if !ok {
				continue // DATA/creds, DATA/keys: a single node
			}
			for _, w := range want {
				if !fileExists(filepath.Join(dir, w)) {
					errorf("%s\n  --%s %s has no %s: utpmesh-init did not put it there", c, f, strings.TrimPrefix(dir, root), w)
				}
			}
		}
		if f, ok := flagValue(argv, "cluster-secret-file"); ok {
			if b, err := os.ReadFile(f); err != nil || len(strings.TrimSpace(string(b))) < 16 {
				errorf("%s\n  --cluster-secret-file %s: want a secret of at least 16 characters (%v)", c, strings.TrimPrefix(f, root), err)
			}
		}
		code, _, errOut := run(t, c.env, argv...)
		if code != 1 || !strings.Contains(errOut, "is in use by") {
			errorf("%s\n  fails before it opens its data directory (exit %d): %s", c, code, strings.TrimSpace(errOut))
		}
	case "worker":
		creds, inFlag := flagValue(argv, "creds")
		if !inFlag {
			creds = c.env["NATS_CREDS"]
		}
		if creds == "" {
			errorf("%s\n  has no credentials (--creds or $NATS_CREDS): the mesh refuses it", c)
			return problems
		}
		if !fileExists(creds) {
			errorf("%s\n  --creds %s: utpmesh-init makes no such file", c, strings.TrimPrefix(creds, root))
			return problems
		}
		bad := filepath.Join(t.TempDir(), "not-a-seed.nk")
		if err := os.WriteFile(bad, []byte("not a seed\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if inFlag {
			argv = setFlag(argv, "creds", bad)
		} else {
			c.env["NATS_CREDS"] = bad
		}
		code, _, errOut := run(t, c.env, argv...)
		locked := code == 1 && strings.Contains(errOut, "is in use by")
		badCreds := code == 2 && strings.Contains(errOut, "--creds:") && strings.Contains(errOut, "not-a-seed.nk")
		if !locked && !badCreds {
			errorf("%s\n  fails before it reads its credentials (exit %d): %s", c, code, strings.TrimSpace(errOut))
		}
	default:
		t.Fatalf("checkStarts: %s is not up or worker", c)
	}
	return problems
}

var (
	initOnce sync.Once
	initDir  string
	initOut  string
	initErr  error
)

// shared returns a directory made once by deploy/docker/utpmesh-init: the
// route secret, seeds and issuer keys a cluster shares.
func shared(t *testing.T) string {
	t.Helper()
	initOnce.Do(func() {
		initDir = filepath.Join(filepath.Dir(cliBin), "shared")
		initOut, initErr = runInit(initDir)
	})
	if initErr != nil {
		t.Fatalf("utpmesh-init: %v\n%s", initErr, initOut)
	}
	return initDir
}

// runInit runs docker/utpmesh-init DIR with the built CLI on PATH.
func runInit(dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", append([]string{"docker/utpmesh-init", dir}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(cliBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// copyTree copies the regular files under src to dst; flat puts them all
// directly in dst (a Kubernetes Secret volume has no subdirectories).
func copyTree(t *testing.T, src, dst string, flat bool) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if flat {
			rel = filepath.Base(rel)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(rel)), 0o700); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}
