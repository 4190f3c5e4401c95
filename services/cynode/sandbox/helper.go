package sandbox

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// helperDir is where an image's sandbox finds the host's setpriv: an
// image has no setpriv of its own (nor the host's C library), so the
// service binds the host's setpriv, its dynamic loader and its libraries
// read-only into a tmpfs there and runs setpriv through that loader. It
// drops to the sandbox's uid and then executes the command from the
// image.
const helperDir = "/.cynode"

// hostHelper is the host's setpriv and what it needs to run.
type hostHelper struct {
	// binds are host path -> name under helperDir.
	binds [][2]string
}

// findHelper resolves setpriv, its loader and its libraries (ldd).
func findHelper() (*hostHelper, error) {
	sp, err := exec.LookPath("setpriv")
	if err != nil {
		return nil, fmt.Errorf("setpriv is not installed (util-linux): %w", err)
	}
	sp, err = filepath.EvalSymlinks(sp)
	if err != nil {
		return nil, err
	}
	out, err := exec.Command("ldd", sp).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", sp, err)
	}
	h := &hostHelper{binds: [][2]string{{sp, "setpriv"}}}
	loader := ""
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			real, err := filepath.EvalSymlinks(f[2])
			if err != nil {
				return nil, err
			}
			h.binds = append(h.binds, [2]string{real, f[0]})
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			real, err := filepath.EvalSymlinks(f[0])
			if err != nil {
				return nil, err
			}
			loader = real
		}
	}
	if loader == "" {
		return nil, fmt.Errorf("ldd %s names no dynamic loader", sp)
	}
	h.binds = append(h.binds, [2]string{loader, "ld.so"})
	for _, b := range h.binds {
		if strings.ContainsAny(b[1], "/\x00") || b[1] == ".." {
			return nil, fmt.Errorf("ldd %s: odd library name %q", sp, b[1])
		}
	}
	slices.SortFunc(h.binds, func(a, b [2]string) int { return strings.Compare(a[1], b[1]) })
	return h, nil
}

// bwrapArgs are the binds of the helper into a sandbox.
func (h *hostHelper) bwrapArgs() []string {
	args := []string{"--tmpfs", helperDir}
	for _, b := range h.binds {
		args = append(args, "--ro-bind", b[0], helperDir+"/"+b[1])
	}
	return append(args, "--remount-ro", helperDir)
}

// command is the helper's invocation: the loader runs setpriv.
func (h *hostHelper) command() []string {
	return []string{helperDir + "/ld.so", "--library-path", helperDir, helperDir + "/setpriv"}
}
