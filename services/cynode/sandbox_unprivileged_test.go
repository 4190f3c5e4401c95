package cynode_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// unprivilegedEnv is set in the environment of the test binary that
// TestSandboxUnprivileged runs as an unprivileged user.
const unprivilegedEnv = "UTPMESH_SANDBOX_UNPRIVILEGED"

// TestSandboxUnprivileged runs the sandbox tests again as the unprivileged
// user nobody (uid 65534) when the tests run as root, so both ways of
// keeping the work dir's tmpfs are tested on one machine: a root service
// mounts it on the host, another keeps it in a holder's user and mount
// namespaces. It needs bwrap, setpriv and user namespaces for nobody.
func TestSandboxUnprivileged(t *testing.T) {
	needBwrap(t)
	if os.Getenv(unprivilegedEnv) != "" {
		t.Skip("already the unprivileged run")
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: the other sandbox tests already run unprivileged")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skipf("setpriv is not installed (util-linux): %v", err)
	}
	if out, err := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--", "unshare", "--user", "--map-root-user", "--mount", "true").CombinedOutput(); err != nil {
		t.Skipf("user namespaces are not available to an unprivileged user here: %v: %s", err, out)
	}
	// A copy of this test binary nobody may run, and a home it owns.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // nobody traverses them
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "cynode.test")
	copyFile(t, os.Args[0], bin)
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--",
		bin, "-test.run", "^(TestSandboxJobDirLimit|TestSandboxSeccomp|TestSandboxLifecycle)$", "-test.count=1", "-test.v")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "TMPDIR=" + home, unprivilegedEnv + "=1", "UTPMESH_REQUIRE_BWRAP=1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the sandbox tests as nobody: %v\n%s", err, out)
	}
	for _, name := range []string{"TestSandboxJobDirLimit", "TestSandboxSeccomp", "TestSandboxLifecycle"} {
		if !strings.Contains(string(out), "--- PASS: "+name) {
			t.Fatalf("%s did not pass as nobody (skipped?):\n%s", name, out)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
