package cynodetest

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// HostBinaries are the host programs a HostImage holds (with the
// libraries ldd names): enough for a shell session on a Debian host
// without network.
var HostBinaries = []string{"/bin/sh", "/usr/bin/cat"}

// HostImage writes a docker save archive tagged tag whose single layer
// holds copies of HostBinaries at /bin/<name>, their libraries at their
// host paths, and files (path -> content); it returns the archive's path.
func HostImage(t testing.TB, tag string, files map[string]string) string {
	t.Helper()
	ents := map[string][]byte{}
	for p, c := range files {
		ents[strings.TrimPrefix(p, "/")] = []byte(c)
	}
	for _, bin := range HostBinaries {
		raw, err := os.ReadFile(bin)
		if err != nil {
			t.Skipf("the test image copies the host's %s: %v", bin, err)
		}
		ents["bin/"+filepath.Base(bin)] = raw
		out, err := exec.Command("ldd", bin).Output()
		if err != nil {
			t.Skipf("ldd %s: %v (the test image copies the host's dynamic binaries)", bin, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			lib := ""
			switch {
			case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
				lib = f[2]
			case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
				lib = f[0]
			}
			if lib == "" {
				continue
			}
			raw, err := os.ReadFile(lib)
			if err != nil {
				t.Fatal(err)
			}
			ents[strings.TrimPrefix(lib, "/")] = raw
		}
	}
	names := make([]string, 0, len(ents))
	for n := range ents {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, n := range names {
		for d := filepath.Dir(n); d != "." && !strings.HasPrefix(d, "..") && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	dl := make([]string, 0, len(dirs))
	for d := range dirs {
		dl = append(dl, d)
	}
	sort.Strings(dl)
	for _, d := range dl {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		mode := int64(0o644)
		if strings.HasPrefix(n, "bin/") || strings.Contains(n, ".so") {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(ents[n]))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(ents[n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "image.tar")
	if err := tarball.WriteToFile(p, tg, img); err != nil {
		t.Fatal(err)
	}
	return p
}
