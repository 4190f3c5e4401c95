package git

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// ErrNoGit is returned when the git binary is not installed.
var ErrNoGit = errors.New("the git binary is not installed (Debian: apt-get install -y git)")

// runner runs the git binary with a fixed, minimal environment: no
// system or global configuration, no hooks, no credential prompts, only
// the file protocol (repositories are local paths the operator
// registered), symlinks checked out as plain files.
type runner struct {
	home    string
	timeout time.Duration
}

var safeConfig = []string{
	"-c", "core.hooksPath=/dev/null",
	"-c", "protocol.allow=never",
	"-c", "protocol.file.allow=always",
	"-c", "core.symlinks=false",
	"-c", "commit.gpgsign=false",
	"-c", "core.fsmonitor=false",
	"-c", "init.defaultBranch=main",
}

// run runs git in dir with args and stdin; it returns stdout, or an error
// holding stderr.
func (r *runner) run(ctx context.Context, dir string, stdin []byte, env []string, args ...string) (string, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return "", ErrNoGit
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append(append([]string{}, safeConfig...), args...)...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + r.home, "LC_ALL=C", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false", "GIT_OPTIONAL_LOCKS=0"}, env...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("git %s: timed out after %s", args[0], r.timeout)
		}
		return "", fmt.Errorf("git %s: %s", args[0], strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}
