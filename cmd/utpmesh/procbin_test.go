package main

import (
	"fmt"
	"os"
)

// The utpmesh processes the tests start. This test binary is utpmesh
// when UTPMESH_TEST_EXEC=1 (TestMain), so a plain `go test` needs no
// separate build. Under -race, though, every process it starts runs the
// whole mesh race-instrumented, several times slower and hungrier; the
// mesh's code is raced in process by the packages' own tests, and what
// these tests check of a process (its flags, exit codes, output, what a
// SIGKILL leaves behind) does not need the detector. So `make test`
// builds bin/utpmesh without it first and names it in UTPMESH_TEST_BIN,
// and the tests start that one.

// testBinEnv names a utpmesh binary for the tests to start.
const testBinEnv = "UTPMESH_TEST_BIN"

// utpmeshBin is the utpmesh binary the tests start as a process:
// UTPMESH_TEST_BIN when set, else this test binary. Start it with
// UTPMESH_TEST_EXEC=1 in its environment (the built binary ignores it).
func utpmeshBin() string {
	if b := os.Getenv(testBinEnv); b != "" {
		return b
	}
	return os.Args[0]
}

// checkTestBin fails when UTPMESH_TEST_BIN names no executable file, so a
// stale or mistyped path is an error, not a run of every process test
// against nothing.
func checkTestBin() error {
	b := os.Getenv(testBinEnv)
	if b == "" {
		return nil
	}
	fi, err := os.Stat(b)
	if err != nil {
		return fmt.Errorf("%s=%s: %w (build it: go build -o %s ./cmd/utpmesh, or unset %s)", testBinEnv, b, err, b, testBinEnv)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s=%s is not an executable file (build it: go build -o %s ./cmd/utpmesh, or unset %s)", testBinEnv, b, b, testBinEnv)
	}
	return nil
}
