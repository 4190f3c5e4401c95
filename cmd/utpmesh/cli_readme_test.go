package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fence is one fenced block of README.md: its info string and lines.
type fence struct {
	lang  string
	lines []string
}

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
	for _, l := range strings.Split(text, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &fence{lang: strings.TrimPrefix(l, "```")}
		case cur != nil && l == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
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

// TestREADMEQuickStart runs the README's quick start as written: 'go run
// ./cmd/utpmesh up' in one directory, then the call command in the same
// directory against it, with the test binary standing in for 'go run
// ./cmd/utpmesh'. The only additions are up's ports (random, so parallel
// test runs do not collide): --nats-listen 127.0.0.1:0, no metrics
// server and --ui-listen 127.0.0.1:0, and the call's $NATS_URL pointing at
// that port. The web UI that up serves then lists the call's turn.
func TestREADMEQuickStart(t *testing.T) {
	const prefix = "go run ./cmd/utpmesh "
	var cmds [][]string
	var want []string
	for _, f := range quickStart(t) {
		for _, l := range f.lines {
			switch {
			case f.lang == "text":
				want = append(want, l)
			case f.lang != "sh":
			case strings.HasPrefix(l, prefix):
				cmds = append(cmds, shellWords(t, strings.TrimPrefix(l, prefix)))
			case strings.HasPrefix(l, "bin/utpmesh "):
				if a := shellWords(t, strings.TrimPrefix(l, "bin/utpmesh ")); a[0] == "call" && len(cmds) > 1 && strings.Join(a, "\x00") != strings.Join(cmds[1], "\x00") {
					t.Errorf("README's bin/utpmesh call %q differs from its quick-start call %q", a, cmds[1])
				}
			case strings.TrimSpace(l) != "":
				t.Errorf("README quick start shows %q: run it as 'go run ./cmd/utpmesh …' or 'bin/utpmesh …' (utpmesh is not on PATH after a clone)", l)
			}
		}
	}
	if len(cmds) < 2 || strings.Join(cmds[0], " ") != "up" || cmds[1][0] != "call" {
		t.Fatalf("README quick start should start with 'go run ./cmd/utpmesh up' then a call, got %q", cmds)
	}
	if len(want) < 3 {
		t.Fatalf("README quick start shows no call output: %q", want)
	}

	dir := t.TempDir()
	environ := func(extra ...string) []string {
		var out []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "NATS_URL=") && !strings.HasPrefix(kv, "UTPMESH_MANDATE=") {
				out = append(out, kv)
			}
		}
		return append(append(out, "UTPMESH_TEST_EXEC=1"), extra...)
	}
	up := exec.Command(os.Args[0], append(cmds[0], "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "127.0.0.1:0")...)
	up.Dir, up.Env = dir, environ()
	var upErr bytes.Buffer
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
	ready := make(chan string, 1)
	var upOut strings.Builder // written by the reader until it sends or closes ready
	go func() {
		sc := bufio.NewScanner(stdout)
		url, sent := "", false
		for sc.Scan() {
			if sent {
				continue
			}
			upOut.WriteString(sc.Text() + "\n")
			if m := urlRe.FindStringSubmatch(sc.Text()); m != nil {
				url = m[1]
			}
			if strings.HasPrefix(sc.Text(), "Press Ctrl-C") {
				sent = true
				ready <- url
			}
		}
		if !sent {
			close(ready)
		}
	}()
	var url string
	select {
	case url = <-ready:
	case <-time.After(2 * time.Minute): // a bound on a hang, not a speed requirement
		t.Fatalf("up did not come up:\n%s", upErr.String())
	}
	if url == "" {
		t.Fatalf("up printed no NATS URL:\n%s\n%s", upOut.String(), upErr.String())
	}

	call := exec.Command(os.Args[0], cmds[1]...)
	call.Dir, call.Env = dir, environ("NATS_URL="+url)
	var out, errb bytes.Buffer
	call.Stdout, call.Stderr = &out, &errb
	if err := call.Run(); err != nil {
		t.Fatalf("%s%s: %v\nstdout:\n%s\nstderr:\n%s", prefix, strings.Join(cmds[1], " "), err, out.String(), errb.String())
	}
	// The README's output: the notice on stderr, then the status line
	// (times and ids differ) and the result as printed.
	if errb.String() != want[0]+"\n" {
		t.Errorf("stderr = %q, README shows %q", errb.String(), want[0])
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	status := regexp.MustCompile(`^success · suspend · \S+ · tool_call_id \S+ · turn cli-\S+$`)
	if len(lines) != len(want)-1 || !status.MatchString(lines[0]) || !strings.HasPrefix(want[1], "success · suspend · ") ||
		strings.Join(lines[1:], "\n") != strings.Join(want[2:], "\n") {
		t.Errorf("stdout:\n%s\nREADME shows:\n%s", out.String(), strings.Join(want[1:], "\n"))
	}

	// The UI printed in up's banner (token in the URL) lists the call's turn.
	m := regexp.MustCompile(`(?m)^\s+ui\s+(http://\S+\?token=\S+)$`).FindStringSubmatch(upOut.String())
	if m == nil {
		t.Fatalf("up printed no ui URL with a token:\n%s", upOut.String())
	}
	turnID := regexp.MustCompile(`turn (cli-\S+)`).FindStringSubmatch(lines[0])
	jar, _ := cookiejar.New(nil)
	resp, err := (&http.Client{Jar: jar, Timeout: 30 * time.Second}).Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || turnID == nil || !bytes.Contains(page, []byte(turnID[1])) {
		t.Errorf("GET %s: %d; want 200 and turn %v listed:\n%s", m[1], resp.StatusCode, turnID, page)
	}

	// Ctrl-C drains and exits 0.
	if err := up.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := up.Wait(); err != nil {
		t.Fatalf("up after Ctrl-C: %v\n%s", err, upErr.String())
	}
}
