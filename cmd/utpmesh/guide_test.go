package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/gomodtest"
)

// guidePath is the contributor guide, seen from this package.
const guidePath = "../../docs/write-a-tool-service.md"

// guideBlock is a fenced block of the guide that follows a marker
// comment <!-- guide: KIND [ARG] -->: "file PATH" (the repo's file,
// whole), "excerpt PATH" (part of the repo's file), "write PATH" (a file
// the reader writes, PATH relative to the clone), "run" (shell steps) and
// "output" (lines the last command prints).
type guideBlock struct {
	kind, arg string
	lines     []string
}

// text is the block's content as a file holds it.
func (b guideBlock) text() string { return strings.Join(b.lines, "\n") + "\n" }

var guideMarker = regexp.MustCompile(`^<!-- guide: (\S+)(?: (\S+))? -->$`)

// readGuide returns the guide's text and its marked blocks, in order.
func readGuide(t *testing.T) (string, []guideBlock) {
	t.Helper()
	b, err := os.ReadFile(guidePath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), markedBlocks(t, string(b), guideMarker)
}

// markedBlocks returns the fenced blocks of text that follow a line
// matching marker (whose two groups are the block's kind and argument),
// in order.
func markedBlocks(t *testing.T, text string, marker *regexp.Regexp) []guideBlock {
	t.Helper()
	var out []guideBlock
	var cur *guideBlock
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case cur != nil && l == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		case marker.MatchString(l):
			m := marker.FindStringSubmatch(l)
			if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
				t.Fatalf("guide line %d: marker %q is not followed by a fenced block", i+1, l)
			}
			cur = &guideBlock{kind: m[1], arg: m[2]}
			i++ // the opening fence
		}
	}
	if cur != nil {
		t.Fatalf("guide: block %s %s is not closed", cur.kind, cur.arg)
	}
	return out
}

// repoPath matches a path of this repository named in the guide.
var repoPath = regexp.MustCompile(`\b(?:services|pkg|cmd|internal|docs|subjects|cardstore|deploy)/[A-Za-z0-9_./-]*[A-Za-z0-9_]`)

// TestGuideInRepo: the source the guide quotes is the repository's, byte
// for byte (whole files and excerpts), and every path it names exists.
func TestGuideInRepo(t *testing.T) {
	text, blocks := readGuide(t)
	quoted := 0
	for _, b := range blocks {
		switch b.kind {
		case "file", "excerpt":
			quoted++
			src, err := os.ReadFile(filepath.Join("../..", b.arg))
			if err != nil {
				t.Errorf("guide quotes %s: %v", b.arg, err)
				continue
			}
			if b.kind == "file" && string(src) != b.text() {
				t.Errorf("guide's copy of %s differs from the file: update the guide's block", b.arg)
			}
			if b.kind == "excerpt" && !strings.Contains(string(src), b.text()) {
				t.Errorf("guide's excerpt of %s is not in the file: update the guide's block:\n%s", b.arg, b.text())
			}
		case "write", "run", "output":
		default:
			t.Errorf("guide: unknown marker kind %q", b.kind)
		}
	}
	if quoted < 3 {
		t.Fatalf("guide quotes %d blocks of the repo, want services/echo's source, its test and the catalogue entry", quoted)
	}
	seen := map[string]bool{}
	for _, p := range repoPath.FindAllString(text, -1) {
		if seen[p] || strings.Contains(p, "/dist/") { // dist/: built by npm run build (part C)
			continue
		}
		seen[p] = true
		if _, err := os.Stat(filepath.Join("../..", p)); err != nil {
			t.Errorf("guide names %s, which does not exist", p)
		}
	}
}

// guideEnv is the environment of the processes the guide starts: the
// test's, without the variables that would point them elsewhere.
func guideEnv(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "NATS_URL", "NATS_CREDS", "UTPMESH_MANDATE", "UTPMESH_TEST_EXEC":
			continue
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}

// startIn starts name args in dir with env; its output (stdout and
// stderr) is read into the proc's lines.
func startIn(t *testing.T, dir string, env []string, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	p := &proc{cmd: cmd, seen: make(chan string, 1024)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		b := make([]byte, 0, 4096)
		buf := make([]byte, 4096)
		for {
			n, err := out.Read(buf)
			b = append(b, buf[:n]...)
			for {
				i := bytes.IndexByte(b, '\n')
				if i < 0 {
					break
				}
				l := string(b[:i])
				b = b[i+1:]
				p.mu.Lock()
				p.lines = append(p.lines, l)
				p.mu.Unlock()
				select {
				case p.seen <- l:
				default:
				}
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	return p
}

// output is what the process printed so far.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// stopWith sends sig and returns the process's exit error (nil: exit 0).
func (p *proc) stopWith(t *testing.T, sig os.Signal) error {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	return p.cmd.Wait()
}

// TestGuideOutsideRepo follows part B of the guide as written: it writes
// the files the guide shows (go.mod's replace pointed at this working
// tree), then runs each "run" block from the clone's directory — 'go run
// ./cmd/utpmesh up' as a process of the test binary, the CLI's other
// commands in process, the go commands in the program's module, the built
// program as a process with the seed up wrote — and checks the call's
// output against the guide's. The only additions are up's ports (a free
// NATS port, no metrics, no UI) and $NATS_URL for the clients. Then the
// program, sent SIGTERM, drains and exits 0, and so does up.
func TestGuideOutsideRepo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module of its own: skipped in -short")
	}
	_, blocks := readGuide(t)
	repo := gomodtest.Root(t)
	clone := filepath.Join(t.TempDir(), "utpmesh")
	if err := os.MkdirAll(clone, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(clone)

	var up, program *proc
	var url, last string
	var want []string
	for _, b := range blocks {
		switch b.kind {
		case "write":
			body := b.text()
			if filepath.Base(b.arg) == "go.mod" {
				const replace = "replace " + gomodtest.Module + " => ../utpmesh\n"
				if !strings.Contains(body, replace) {
					t.Fatalf("the guide's go.mod lacks %q", replace)
				}
				body = strings.Replace(body, replace, "replace "+gomodtest.Module+" => "+repo+"\n", 1)
			}
			gomodtest.Write(t, clone, map[string]string{b.arg: body})
		case "output":
			want = append(want, b.lines...)
		case "run":
			cwd := clone
			for _, line := range b.lines {
				w := shellWords(t, line)
				if len(w) == 0 {
					continue
				}
				redirect, appendTo := "", false
				if n := len(w); n >= 3 && (w[n-2] == ">" || w[n-2] == ">>") {
					redirect, appendTo, w = filepath.Join(cwd, w[n-1]), w[n-2] == ">>", w[:n-2]
				}
				var out []byte
				switch {
				case len(w) > 3 && strings.Join(w[:3], " ") == "go run ./cmd/utpmesh" && w[3] == "up":
					up = startIn(t, cwd, guideEnv("UTPMESH_TEST_EXEC=1"), utpmeshBin(),
						append(w[3:], "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "")...)
					up.waitLine(t, "Press Ctrl-C")
					m := regexp.MustCompile(`(?m)^\s+NATS\s+(nats://\S+)`).FindStringSubmatch(up.output())
					if m == nil {
						t.Fatalf("up printed no NATS URL:\n%s", up.output())
					}
					url = m[1]
				case len(w) > 3 && strings.Join(w[:3], " ") == "go run ./cmd/utpmesh":
					t.Chdir(cwd)
					var stdout, stderr bytes.Buffer
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					code := run(ctx, w[3:], env{stdout: &stdout, stderr: &stderr, getenv: func(k string) string {
						if k == "NATS_URL" {
							return url
						}
						return ""
					}})
					cancel()
					if code != 0 {
						t.Fatalf("guide step %q: exit %d\nstdout:\n%s\nstderr:\n%s", line, code, stdout.String(), stderr.String())
					}
					out = stdout.Bytes()
				case w[0] == "cd" && len(w) == 2:
					cwd = filepath.Join(cwd, w[1])
				case w[0] == "cp" && len(w) == 3:
					data, err := os.ReadFile(filepath.Join(cwd, w[1]))
					if err != nil {
						t.Fatalf("guide step %q: %v", line, err)
					}
					dst := filepath.Join(cwd, w[2])
					if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
						dst = filepath.Join(dst, filepath.Base(w[1]))
					}
					if err := os.WriteFile(dst, data, 0o600); err != nil {
						t.Fatal(err)
					}
				case w[0] == "cat" && len(w) == 2:
					data, err := os.ReadFile(filepath.Join(cwd, w[1]))
					if err != nil {
						t.Fatalf("guide step %q: %v", line, err)
					}
					out = data
				case w[0] == "go":
					out = []byte(gomodtest.Go(t, cwd, gomodtest.Env, w[1:]...))
				case strings.HasPrefix(w[0], "./"):
					program = startIn(t, cwd, guideEnv("NATS_URL="+url), filepath.Join(cwd, w[0]), w[1:]...)
					program.waitLine(t, "worker serving")
				default:
					t.Fatalf("guide step %q: the test does not know how to run it; use the commands it knows or teach it", line)
				}
				if redirect != "" {
					flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
					if appendTo {
						flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
					}
					f, err := os.OpenFile(redirect, flags, 0o600)
					if err != nil {
						t.Fatal(err)
					}
					_, werr := f.Write(out)
					if err := errors.Join(werr, f.Close()); err != nil {
						t.Fatal(err)
					}
				} else if out != nil {
					last = string(out)
				}
			}
		}
	}
	if up == nil || program == nil || len(want) == 0 {
		t.Fatalf("the guide's steps start no up (%v), no program (%v) or show no output (%q)", up != nil, program != nil, want)
	}
	t.Logf("the call printed:\n%s", last)
	got := strings.Split(strings.TrimRight(last, "\n"), "\n")
	for _, l := range want {
		// "…" in the guide's output stands for what differs between runs.
		re := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(l), "…", ".+") + "$")
		found := false
		for _, g := range got {
			found = found || re.MatchString(g)
		}
		if !found {
			t.Errorf("the call printed:\n%s\nthe guide shows the line %q", last, l)
		}
	}
	if err := program.stopWith(t, syscall.SIGTERM); err != nil {
		t.Fatalf("the program after SIGTERM: %v, want exit 0\n%s", err, program.output())
	}
	if err := up.stopWith(t, os.Interrupt); err != nil {
		t.Fatalf("up after Ctrl-C: %v\n%s", err, up.output())
	}
}
