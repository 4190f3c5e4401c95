package deploy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// subcommands are the CLI's command names ('utpmesh --help').
func subcommands(t *testing.T) []string {
	t.Helper()
	_, out, _ := run(t, nil, "--help")
	var names []string
	inList := false
	for _, line := range strings.Split(out, "\n") {
		if line == "Commands:" {
			inList = true
			continue
		}
		if f := strings.Fields(line); inList && len(f) > 0 && strings.HasPrefix(line, "  ") {
			names = append(names, f[0])
		}
	}
	if len(names) < 5 {
		t.Fatalf("utpmesh --help lists commands %v", names)
	}
	return names
}

// TestScriptsSyntax checks the shell scripts with sh -n.
func TestScriptsSyntax(t *testing.T) {
	for _, f := range []string{"docker/utpmesh-init", "compose/smoke.sh"} {
		if out, err := exec.Command("sh", "-n", f).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v\n%s", f, err, out)
		}
		if st, err := os.Stat(f); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s: want an executable file (%v)", f, err)
		}
	}
}

// TestShellCommandLines runs the CLI's flag parser over every utpmesh
// command line in the scripts and in this directory's README.
func TestShellCommandLines(t *testing.T) {
	subs := subcommands(t)
	texts := map[string]string{}
	for _, f := range []string{"docker/utpmesh-init", "compose/smoke.sh"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		texts[f] = string(b)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for i, block := range shBlocks(string(readme)) {
		texts[fmt.Sprintf("README.md sh block %d", i+1)] = block
	}
	n := 0
	for src, text := range texts {
		cmds, err := shellCommands(src, text, subs)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			n++
			checkParses(t, c)
		}
	}
	if n < 8 {
		t.Errorf("found only %d utpmesh command lines in the scripts and README", n)
	}
}

var shBlock = regexp.MustCompile("(?s)```sh\n(.*?)```")

func shBlocks(md string) []string {
	var out []string
	for _, m := range shBlock.FindAllStringSubmatch(md, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestSmokeScriptMatchesCompose checks that every compose service
// smoke.sh names exists, and that those it waits on have health checks.
func TestSmokeScriptMatchesCompose(t *testing.T) {
	f := loadCompose(t)
	b, err := os.ReadFile("compose/smoke.sh")
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`docker compose (?:kill|start|stop|restart|logs --tail \d+|exec -T|ps -q) ([a-z0-9]+)`)
	n := 0
	for _, m := range named.FindAllStringSubmatch(string(b), -1) {
		if m[1] == "svc" { // the loop variable of wait_healthy
			continue
		}
		n++
		if _, ok := f.Services[m[1]]; !ok {
			t.Errorf("smoke.sh: docker compose ... %s: no such service in compose.yaml", m[1])
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^wait_healthy (.+)$`).FindAllStringSubmatch(string(b), -1) {
		for _, s := range strings.Fields(m[1]) {
			n++
			if svc, ok := f.Services[s]; !ok || svc.Healthcheck == nil {
				t.Errorf("smoke.sh: wait_healthy %s: no such service with a healthcheck", s)
			}
		}
	}
	if n < 5 {
		t.Errorf("smoke.sh: found only %d service names", n)
	}
}

// TestInit checks utpmesh-init: it makes the route secret, the seeds of
// every identity a node and the workers need, and the issuer key; a
// second run changes nothing.
func TestInit(t *testing.T) {
	dir := shared(t)
	for _, f := range []string{"route-secret", "creds/core.nk", "creds/admin.nk", "creds/agent-demo.nk",
		"creds/worker-echo.nk", "creds/worker-atlas_tasks.nk", "keys/demo.pem"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || len(b) == 0 {
			t.Errorf("utpmesh-init made no %s: %v", f, err)
		}
	}
	secret, _ := os.ReadFile(filepath.Join(dir, "route-secret"))
	if n := len(strings.TrimSpace(string(secret))); n < 16 {
		t.Errorf("route-secret has %d characters, the routes need at least 16", n)
	}
	before := snapshot(t, dir)
	out, err := runInit(dir)
	if err != nil || !strings.Contains(out, "nothing to do") {
		t.Errorf("second utpmesh-init: %v\n%s", err, out)
	}
	if after := snapshot(t, dir); after != before {
		t.Errorf("a second utpmesh-init changed the files:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestNodeOnSharedFiles runs a node with replicated state (--state
// jetstream) on utpmesh-init's files, a worker of atlas.tasks with its
// seed from them and a call with the admin seed and the demo mandate the
// node signs with the shared key; the node must leave the shared files
// unchanged, so they can be mounted read-only. Both layouts: creds/ and
// keys/ apart (compose, systemd) and flat in one directory (the
// Kubernetes Secret).
func TestNodeOnSharedFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node and a worker")
	}
	for _, flat := range []bool{false, true} {
		t.Run(map[bool]string{false: "split", true: "flat"}[flat], func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "shared")
			copyTree(t, shared(t), dir, flat)
			creds, keys := filepath.Join(dir, "creds"), filepath.Join(dir, "keys")
			if flat {
				creds, keys = dir, dir
			}
			before := snapshot(t, dir)
			data := filepath.Join(t.TempDir(), "node")
			node := startLong(t, "up", "--data", data, "--state", "jetstream", "--nats-listen", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
				"--ui-listen", "", "--creds-dir", creds, "--keys-dir", keys)
			line := node.waitFor(t, "  NATS ")
			url := strings.Fields(line)[1]
			node.waitFor(t, " to drain and stop")
			w := startLong(t, "worker", "--nats", url, "--creds", filepath.Join(creds, "worker-atlas_tasks.nk"),
				"--atlas-state", "jetstream", "atlas.tasks")
			w.waitFor(t, "serving")
			code, out, errOut := run(t, nil, "call", "echo", "--args", `{"deploy":1}`, "--nats", url,
				"--creds", filepath.Join(creds, "admin.nk"), "--mandate", filepath.Join(data, "demo-mandate.jwt"))
			if code != 0 || !strings.Contains(out, "success") {
				t.Fatalf("call echo: exit %d\n%s\n%s", code, out, errOut)
			}
			if !flat {
				runSmokeCalls(t, url, creds, data)
			}
			w.stop(t)
			node.stop(t)
			if after := snapshot(t, dir); after != before {
				t.Errorf("the node changed the shared files (they could not be read-only):\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// runSmokeCalls runs smoke.sh's utpmesh command lines against a running
// node — /shared/creds as creds, /data as the node's data directory,
// --nats its URL — each twice, as smoke.sh's retry would.
func runSmokeCalls(t *testing.T, url, creds, data string) {
	t.Helper()
	b, err := os.ReadFile("compose/smoke.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := shellCommands("compose/smoke.sh", string(b), subcommands(t))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range cmds {
		argv := setFlag(c.argv, "nats", url)
		for i, a := range argv {
			switch {
			case strings.HasPrefix(a, "/shared/creds/"):
				argv[i] = filepath.Join(creds, strings.TrimPrefix(a, "/shared/creds/"))
			case strings.HasPrefix(a, "/data/"):
				argv[i] = filepath.Join(data, strings.TrimPrefix(a, "/data/"))
			}
		}
		for range 2 {
			n++
			if code, out, errOut := run(t, nil, argv...); code != 0 {
				t.Errorf("%s\n  against a node: exit %d\n%s\n%s", c, code, out, errOut)
			}
		}
	}
	if n < 8 {
		t.Errorf("smoke.sh: ran only %d command lines", n)
	}
}

// longRun is a utpmesh process the test started.
type longRun struct {
	cmd   *exec.Cmd
	lines chan string
	seen  []string

	// patience is how long waitFor waits (default a minute).
	patience time.Duration

	mu  sync.Mutex
	all []string // every line so far, for messages
}

// output is every line the process printed so far.
func (r *longRun) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.all, "\n")
}

func startLong(t *testing.T, args ...string) *longRun {
	t.Helper()
	cmd := exec.Command(cliBin, args...)
	cmd.Dir = t.TempDir()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &longRun{cmd: cmd, lines: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			r.mu.Lock()
			r.all = append(r.all, sc.Text())
			r.mu.Unlock()
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = pw.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return r
}

// waitFor returns the first output line containing s; it fails when the
// process ends first or after r.patience.
func (r *longRun) waitFor(t *testing.T, s string) string {
	t.Helper()
	patience := r.patience
	if patience == 0 {
		patience = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				t.Fatalf("utpmesh %s ended before printing %q:\n%s", strings.Join(r.cmd.Args[1:], " "), s, strings.Join(r.seen, "\n"))
			}
			r.seen = append(r.seen, l)
			if strings.Contains(l, s) {
				return l
			}
		case <-ctx.Done():
			t.Fatalf("utpmesh %s: no %q after %v:\n%s", strings.Join(r.cmd.Args[1:], " "), s, patience, r.output())
		}
	}
}

// stop sends SIGTERM and waits for the output to end (the process exited).
func (r *longRun) stop(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for l := range r.lines {
		r.seen = append(r.seen, l)
	}
	if r.cmd.ProcessState != nil && !r.cmd.ProcessState.Success() {
		t.Errorf("utpmesh %s: %v after SIGTERM:\n%s", r.cmd.Args[1], r.cmd.ProcessState, strings.Join(r.seen, "\n"))
	}
}

// snapshot lists the files under dir with their modes and hashes.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		sum := ""
		if !d.IsDir() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum = fmt.Sprintf("%x", sha256.Sum256(data))
		}
		fmt.Fprintf(&b, "%s %v %s\n", rel, info.Mode(), sum)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
