package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fence is one fenced block of README.md's quick start: its info string,
// its lines, and its marker comment's kind ("run" or "output" for a
// block under <!-- readme: KIND -->, else "").
type fence struct {
	lang, kind string
	lines      []string
}

// readmeMarker marks a block the test runs, or the output it checks.
var readmeMarker = regexp.MustCompile(`^<!-- readme: (run|output) -->$`)

// quickStart returns the fenced blocks of README.md's "## Quick start"
// section.
func quickStart(t *testing.T) []fence {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "\n## Quick start\n")
	if i < 0 {
		t.Fatal(`README.md has no "## Quick start" section`)
	}
	text = text[i+1:]
	if j := strings.Index(text[3:], "\n## "); j >= 0 {
		text = text[:j+3]
	}
	var out []fence
	var cur *fence
	marker := ""
	for _, l := range strings.Split(text, "\n") {
		switch {
		case cur == nil && readmeMarker.MatchString(l):
			marker = readmeMarker.FindStringSubmatch(l)[1]
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &fence{lang: strings.TrimPrefix(l, "```"), kind: marker}
			marker = ""
		case cur != nil && l == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		case strings.TrimSpace(l) != "":
			marker = "" // a marker belongs to the block right below it
		}
	}
	return out
}

// shellWords splits a command line as sh would for the README's commands:
// words separated by blanks, single and double quotes, a trailing
// "# comment".
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				t.Fatalf("unbalanced %c in %q", c, line)
			}
			w.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			i = len(line)
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// TestREADMEQuickStart runs README.md's quick start as written: every
// block marked <!-- readme: run -->, line by line, each checked against
// the <!-- readme: output --> block below it. 'go run ./cmd/utpmesh up'
// starts up in a directory standing for the clone; the other commands run
// the test binary in place of 'go run ./cmd/utpmesh' and of the clone's
// bin/utpmesh ('make build' is therefore skipped); 'cd' moves to another
// directory (back to the clone for 'cd ~/utpmesh'); ~/utpmesh is the
// clone; a confirmation id is the one the
// previous call printed; the nats CLI runs when it is installed, with a
// home of its own. The only additions are up's ports (random, so parallel
// test runs do not collide: --nats-listen 127.0.0.1:0, no metrics server,
// --ui-listen 127.0.0.1:0) and the commands' $NATS_URL pointing at that
// port (nats://127.0.0.1:4222 in a line is that URL too). An output
// block is matched line by line; "…", the times, timestamps and the ids
// that differ per run (tool_call_id, turn, cfm_…, block_…) match any
// value. The web UI that up serves then lists the first call's turn.
func TestREADMEQuickStart(t *testing.T) {
	const prefix = "go run ./cmd/utpmesh "
	blocks := quickStart(t)
	runs := 0
	for _, f := range blocks {
		if f.kind == "run" {
			runs++
		}
		if f.lang != "sh" {
			continue
		}
		for _, l := range f.lines {
			switch w := strings.Fields(l); {
			case len(w) == 0, strings.HasPrefix(l, prefix), strings.HasPrefix(l, "bin/utpmesh "):
			case f.kind == "run" && (w[0] == "make" || w[0] == "cd" || w[0] == "nats" || strings.HasSuffix(w[0], "/bin/utpmesh")):
			default:
				t.Errorf("README quick start shows %q: run it as 'go run ./cmd/utpmesh …' or 'bin/utpmesh …' (utpmesh is not on PATH after a clone)", l)
			}
		}
	}
	if len(blocks) == 0 || blocks[0].kind != "" || strings.Join(blocks[0].lines, "\n") != prefix+"up" || runs < 4 {
		t.Fatalf("README quick start should start with an unmarked 'go run ./cmd/utpmesh up', then blocks to run, got %+v", blocks)
	}

	clone := t.TempDir()
	environ := func(extra ...string) []string {
		var out []string
		for _, kv := range os.Environ() {
			k, _, _ := strings.Cut(kv, "=")
			switch k {
			case "NATS_URL", "NATS_CREDS", "UTPMESH_MANDATE", "UTPMESH_TEST_EXEC", "HOME", "XDG_CONFIG_HOME", "NATS_CONTEXT":
			default:
				out = append(out, kv)
			}
		}
		return append(append(out, "UTPMESH_TEST_EXEC=1"), extra...)
	}
	up, url, upOut := startREADMEUp(t, clone, environ())

	home := t.TempDir() // the nats CLI's contexts
	r := &readmeRun{t: t, dir: clone, clone: clone, url: url,
		env: environ("NATS_URL="+url, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))}
	var firstTurn string
	for _, f := range blocks[1:] {
		switch f.kind {
		case "run":
			for _, l := range f.lines {
				r.line(l)
				if m := regexp.MustCompile(`turn (cli-\S+)`).FindStringSubmatch(r.stdout); firstTurn == "" && m != nil {
					firstTurn = m[1]
				}
			}
		case "output":
			r.check(f.lines)
		}
	}

	// The UI printed in up's banner (token in the URL) lists the first
	// call's turn.
	m := regexp.MustCompile(`(?m)^\s+ui\s+(http://\S+\?token=\S+)$`).FindStringSubmatch(upOut)
	if m == nil {
		t.Fatalf("up printed no ui URL with a token:\n%s", upOut)
	}
	jar, _ := cookiejar.New(nil)
	resp, err := (&http.Client{Jar: jar, Timeout: 30 * time.Second}).Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || firstTurn == "" || !bytes.Contains(page, []byte(firstTurn)) {
		t.Errorf("GET %s: %d; want 200 and turn %q listed:\n%s", m[1], resp.StatusCode, firstTurn, page)
	}

	// Ctrl-C drains and exits 0.
	if err := up.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := up.Wait(); err != nil {
		t.Fatalf("up after Ctrl-C: %v", err)
	}
}

// startREADMEUp starts 'utpmesh up' in dir as the quick start does, on
// random ports, and returns the process, its NATS URL and its banner.
func startREADMEUp(t *testing.T, dir string, env []string) (*exec.Cmd, string, string) {
	t.Helper()
	up := exec.Command(utpmeshBin(), "up", "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "127.0.0.1:0")
	up.Dir, up.Env = dir, env
	var upErr lockedBuffer
	up.Stderr = &upErr
	stdout, err := up.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if up.ProcessState == nil {
			_ = up.Process.Kill()
			_ = up.Wait()
		}
	})
	urlRe := regexp.MustCompile(`^\s+NATS\s+(nats://\S+)`)
	type banner struct{ url, text string }
	ready := make(chan banner, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		var b banner
		sent := false
		for sc.Scan() {
			if sent {
				continue
			}
			b.text += sc.Text() + "\n"
			if m := urlRe.FindStringSubmatch(sc.Text()); m != nil {
				b.url = m[1]
			}
			if strings.HasPrefix(sc.Text(), "Press Ctrl-C") {
				sent = true
				ready <- b
			}
		}
		if !sent {
			close(ready)
		}
	}()
	var b banner
	select {
	case b = <-ready:
	case <-time.After(2 * time.Minute): // a bound on a hang, not a speed requirement
		t.Fatalf("up did not come up:\n%s", upErr.String())
	}
	if b.url == "" {
		t.Fatalf("up printed no NATS URL:\n%s\n%s", b.text, upErr.String())
	}
	return up, b.url, b.text
}

// readmeRun is the state of a quick start being followed: the directory
// the next command runs in, and what the last one printed.
type readmeRun struct {
	t                  *testing.T
	dir, clone, url    string
	env                []string
	stdout, stderr     string
	confirmationID     string
	natsCLI, natsSkips bool
}

// confirmationRe is a confirmation id, as a call prints it.
var confirmationRe = regexp.MustCompile(`cfm_[a-z]+_[0-9a-f]+`)

// line runs one line of a run block.
func (r *readmeRun) line(l string) {
	t := r.t
	t.Helper()
	w := shellWords(t, l)
	if len(w) == 0 {
		return
	}
	for i := range w {
		w[i] = strings.ReplaceAll(w[i], "~/utpmesh/", r.clone+"/")
		w[i] = strings.ReplaceAll(w[i], "$PWD", r.dir)
		w[i] = strings.ReplaceAll(w[i], "nats://127.0.0.1:4222", r.url)
		if r.confirmationID != "" {
			w[i] = confirmationRe.ReplaceAllString(w[i], r.confirmationID)
		}
	}
	var cmd *exec.Cmd
	switch {
	case w[0] == "make" && len(w) == 2 && w[1] == "build":
		return // the test binary stands in for bin/utpmesh
	case w[0] == "cd" && len(w) == 2 && w[1] == "~/utpmesh":
		r.dir = r.clone
		return
	case w[0] == "cd":
		r.dir = t.TempDir() // another directory, with nothing of the clone
		return
	case w[0] == "go" && len(w) > 3 && w[1] == "run" && w[2] == "./cmd/utpmesh":
		cmd = exec.Command(utpmeshBin(), w[3:]...)
	case w[0] == r.clone+"/bin/utpmesh":
		cmd = exec.Command(utpmeshBin(), w[1:]...)
	case w[0] == "nats":
		p, err := exec.LookPath("nats")
		if err != nil {
			if !r.natsSkips {
				t.Logf("the nats CLI is not on PATH: its lines of the quick start are not run (go install github.com/nats-io/natscli/nats@latest)")
			}
			r.natsSkips = true
			r.stdout, r.stderr = "", ""
			return
		}
		r.natsCLI = true
		cmd = exec.Command(p, w[1:]...)
	default:
		t.Fatalf("README quick start: the test does not know how to run %q", l)
	}
	cmd.Dir, cmd.Env = r.dir, r.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s (in %s): %v\nstdout:\n%s\nstderr:\n%s", l, r.dir, err, out.String(), errb.String())
	}
	r.stdout, r.stderr = out.String(), errb.String()
	if w[0] == "nats" && strings.Contains(l, " req ") && !strings.Contains(r.stdout, `"tool_name":"echo"`) {
		t.Errorf("%s: want echo's registry entry\nstdout:\n%s\nstderr:\n%s", l, r.stdout, r.stderr)
	}
	if id := confirmationRe.FindString(r.stdout); id != "" {
		r.confirmationID = id
	}
}

// readmeVarying are the values of an output block that differ per run,
// each matched by its pattern: a duration, a timestamp, a UUIDv7 (tool
// call and turn ids), a confirmation id and an ATLAS block id.
var readmeVarying = regexp.MustCompile(`\d+(?:\.\d+)?(?:ms|µs|s)\b|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ|cfm_[a-z]+_[0-9a-f]+|block_[0-9a-f]+`)

// check compares the last command's output (stderr, then stdout) with an
// output block of the README.
func (r *readmeRun) check(want []string) {
	t := r.t
	t.Helper()
	got := strings.Split(strings.TrimSuffix(r.stderr+r.stdout, "\n"), "\n")
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = readmeLine(want[i]).MatchString(got[i])
	}
	if !ok {
		t.Errorf("output:\n%s\nREADME shows:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// readmeElided is an elided value of an output block: "…", and the
// digits before it ("0193…" of an id).
var readmeElided = regexp.MustCompile(`[0-9a-f]*…`)

// readmeLine is the pattern of one line of an output block: the line
// as written, with elided values ("…", "0193…") and readmeVarying's
// values matching any value.
func readmeLine(want string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i, part := range readmeElided.Split(want, -1) {
		if i > 0 {
			b.WriteString(".*")
		}
		last := 0
		for _, m := range readmeVarying.FindAllStringIndex(part, -1) {
			b.WriteString(regexp.QuoteMeta(part[last:m[0]]))
			v := part[m[0]:m[1]]
			switch {
			case strings.HasPrefix(v, "cfm_"):
				b.WriteString(`cfm_[a-z]+_[0-9a-f]+`)
			case strings.HasPrefix(v, "block_"):
				b.WriteString(`block_[0-9a-f]+`)
			case strings.Contains(v, "T"):
				b.WriteString(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
			default:
				b.WriteString(`\d+(?:\.\d+)?(?:ms|µs|s)`)
			}
			last = m[1]
		}
		b.WriteString(regexp.QuoteMeta(part[last:]))
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}
