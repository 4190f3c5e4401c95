// Package gomodtest builds Go programs in modules of their own for tests:
// a temporary module that requires this one through a replace directive,
// as a project outside this repository would. pkg/sdk's external-module
// test and the contributor guide's test (cmd/utpmesh) share it.
package gomodtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Module is this repository's module path.
const Module = "github.com/utpmesh/utpmesh"

// Env is the environment a temporary module's go commands run with: the
// module file may be updated, and no workspace applies.
var Env = []string{"GOFLAGS=-mod=mod", "GOWORK=off"}

// ErrNoGo: the go command of the toolchain running the test is not found.
var ErrNoGo = errors.New("gomodtest: no go command")

// GoTool is the go command of the toolchain running the test: go test puts
// its GOROOT/bin first on the test's PATH.
func GoTool(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("%v: %v", ErrNoGo, err)
	}
	return p
}

// Go runs the go command with args in dir (env added to the test's) and
// returns its standard output; it fails the test when the command fails.
func Go(t testing.TB, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(GoTool(t), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return string(out)
}

// Root is the directory of this module (the working tree under test).
func Root(t testing.TB) string {
	t.Helper()
	return strings.TrimSpace(Go(t, ".", nil, "list", "-m", "-f", "{{.Dir}}"))
}

// GoVersion is the go directive of this module.
func GoVersion(t testing.TB) string {
	t.Helper()
	return strings.TrimSpace(Go(t, ".", nil, "list", "-m", "-f", "{{.GoVersion}}"))
}

// GoMod is the go.mod of a module named name that requires this module
// from the working tree at root.
func GoMod(name, goVersion, root string) string {
	return fmt.Sprintf("module %s\n\ngo %s\n\nrequire %s v0.0.0-00010101000000-000000000000\n\nreplace %s => %s\n",
		name, goVersion, Module, Module, root)
}

// Write writes files (name → content, names relative to dir) into dir.
func Write(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Build tidies the module in dir, vets it and builds its main package to
// dir/<out>, returning the binary's path.
func Build(t testing.TB, dir, out string) string {
	t.Helper()
	Go(t, dir, Env, "mod", "tidy")
	Go(t, dir, Env, "vet", ".")
	bin := filepath.Join(dir, out)
	Go(t, dir, Env, "build", "-o", bin, ".")
	return bin
}

// Deps lists the packages outside the standard library that the package
// pattern pkg in dir depends on (go list -deps).
func Deps(t testing.TB, dir string, env []string, pkg string) []string {
	t.Helper()
	out := Go(t, dir, env, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg)
	var deps []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			deps = append(deps, l)
		}
	}
	return deps
}
