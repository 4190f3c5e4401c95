package imagestore_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/utpmesh/utpmesh/services/cynode/internal/imagestore"
)

// E is one entry of a hand-made layer.
type E struct {
	Name, Body, Link string
	Type             byte
	Mode             int64
}

// Layer builds an uncompressed layer from entries, exactly as given (no
// cleaning: hostile names stay hostile).
func Layer(t testing.TB, ents ...E) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		typ := e.Type
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.Mode
		if mode == 0 {
			mode = 0o644
			if typ == tar.TypeDir {
				mode = 0o755
			}
		}
		h := &tar.Header{Name: e.Name, Typeflag: typ, Mode: mode, Linkname: e.Link, Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("header %s: %v", e.Name, err)
		}
		if _, err := tw.Write([]byte(e.Body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Image stacks layers (first is lowest) on an empty image.
func Image(t testing.TB, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// SaveDocker writes img as a docker save archive tagged tag.
func SaveDocker(t testing.TB, img v1.Image, tag string) string {
	t.Helper()
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

var now = time.Date(2026, 11, 23, 7, 0, 0, 0, time.UTC)

func open(t *testing.T, lim imagestore.Limits) (*imagestore.Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "images")
	s, err := imagestore.Open(dir, lim)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func TestImportDockerArchive(t *testing.T) {
	lower := Layer(t,
		E{Name: "etc/", Type: tar.TypeDir},
		E{Name: "etc/os-release", Body: "ID=lower\n"},
		E{Name: "etc/secret", Body: "lower secret\n"},
		E{Name: "bin/", Type: tar.TypeDir},
		E{Name: "bin/sh", Body: "#!sh\n", Mode: 0o4755},
		E{Name: "usr/bin/newgrp", Body: "x", Mode: 0o2755},
		E{Name: "usr/lib/libc.so", Body: "lib"},
		E{Name: "lib", Type: tar.TypeSymlink, Link: "usr/lib"},
		E{Name: "bin/ash", Type: tar.TypeSymlink, Link: "/bin/sh"},
		E{Name: "opt/old", Body: "old"},
	)
	upper := Layer(t,
		E{Name: "./etc/os-release", Body: "ID=upper\n"},
		E{Name: "etc/.wh.secret"},
		E{Name: "opt/.wh..wh..opq"},
		E{Name: "opt/new", Body: "new"},
		E{Name: "bin/sh2", Type: tar.TypeLink, Link: "bin/sh"},
	)
	img := Image(t, lower, upper)
	s, dir := open(t, imagestore.Limits{})
	ims, err := s.Import(context.Background(), SaveDocker(t, img, "example.com/test/img:1"), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(ims) != 1 || ims[0].Refs[0] != "example.com/test/img:1" || ims[0].SetuidStripped != 2 {
		t.Fatalf("import = %+v", ims)
	}
	id := ims[0].ID
	im, err := s.Resolve("example.com/test/img:1")
	if err != nil || im.ID != id || im.Rootfs != filepath.Join(dir, id, "rootfs") {
		t.Fatalf("resolve = %+v, %v", im, err)
	}
	if byID, err := s.Resolve(id); err != nil || byID.ID != id {
		t.Fatalf("resolve by id = %+v, %v", byID, err)
	}
	r := im.Rootfs
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(r, p))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	for p, want := range map[string]string{"etc/os-release": "ID=upper\n", "opt/new": "new", "bin/sh2": "#!sh\n", "lib/libc.so": "lib"} {
		if got := read(p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	for _, gone := range []string{"etc/secret", "opt/old", "etc/.wh.secret", "opt/.wh..wh..opq"} {
		if _, err := os.Lstat(filepath.Join(r, gone)); !os.IsNotExist(err) {
			t.Errorf("%s survived the whiteout: %v", gone, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(r, "bin/ash")); err != nil || l != "/bin/sh" {
		t.Errorf("bin/ash -> %q, %v", l, err)
	}
	for _, p := range []string{"bin/sh", "usr/bin/newgrp"} {
		fi, err := os.Stat(filepath.Join(r, p))
		if err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s mode %v (%v): setuid/setgid must be stripped, the rest kept", p, fi.Mode(), err)
		}
	}
	a, _ := os.Stat(filepath.Join(r, "bin/sh"))
	b, _ := os.Stat(filepath.Join(r, "bin/sh2"))
	if a.Sys().(*syscall.Stat_t).Ino != b.Sys().(*syscall.Stat_t).Ino {
		t.Error("bin/sh2 is not a hard link of bin/sh")
	}
	for _, m := range imagestore.MountPoints {
		if fi, err := os.Lstat(filepath.Join(r, m)); err != nil || !fi.IsDir() {
			t.Errorf("mount point %s: %v", m, err)
		}
	}

	// Again: already there, not unpacked again.
	again, err := s.Import(context.Background(), SaveDocker(t, img, "example.com/test/img:latest"), now.Add(time.Hour))
	if err != nil || again[0].ID != id || !again[0].ImportedAt.Equal(now) || len(again[0].Refs) != 2 {
		t.Fatalf("re-import = %+v, %v", again, err)
	}
	if _, err := s.Resolve("example.com/test/img"); err != nil {
		t.Fatalf("the :latest ref: %v", err)
	}
	if _, err := s.Resolve("docker.io/library/python:3.12"); !errors.Is(err, imagestore.ErrNotFound) {
		t.Fatalf("unknown ref: %v", err)
	}
	// A store reopened keeps its images.
	s2, err := imagestore.Open(dir, imagestore.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if list, err := s2.List(); err != nil || len(list) != 1 || list[0].ID != id {
		t.Fatalf("list after reopen = %+v, %v", list, err)
	}
}

func TestImportOCILayout(t *testing.T) {
	img := Image(t, Layer(t, E{Name: "hello.txt", Body: "hi"}))
	dir := filepath.Join(t.TempDir(), "oci")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "example.com/test/layout:2"})); err != nil {
		t.Fatal(err)
	}
	s, _ := open(t, imagestore.Limits{})
	ims, err := s.Import(context.Background(), dir, now)
	if err != nil || len(ims) != 1 {
		t.Fatalf("import = %+v, %v", ims, err)
	}
	im, err := s.Resolve("example.com/test/layout:2")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(im.Rootfs, "hello.txt")); err != nil || string(b) != "hi" {
		t.Fatalf("hello.txt = %q, %v", b, err)
	}
}

func TestImportNotAnImage(t *testing.T) {
	s, _ := open(t, imagestore.Limits{})
	junk := filepath.Join(t.TempDir(), "junk.tar")
	if err := os.WriteFile(junk, []byte("not a tar"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{junk, t.TempDir()} {
		_, err := s.Import(context.Background(), src, now)
		if !errors.Is(err, imagestore.ErrFormat) || !strings.Contains(err.Error(), "docker save archive") {
			t.Errorf("%s: %v", src, err)
		}
	}
	for _, ref := range []string{"Bad Ref", "sha256:abc", "x@sha256:" + strings.Repeat("a", 64)} {
		if _, err := s.Resolve(ref); err == nil || errors.Is(err, imagestore.ErrNotFound) {
			t.Errorf("Resolve(%q) = %v, want a malformed-ref error", ref, err)
		}
	}
	if n, err := imagestore.Normalize("python:3.12"); err != nil || n != "index.docker.io/library/python:3.12" {
		t.Errorf("Normalize = %q, %v", n, err)
	}
}

// TestImportHostile: each crafted image is refused whole, nothing of it
// stays in the store, and nothing is written outside it.
func TestImportHostile(t *testing.T) {
	lim := imagestore.Limits{MaxBytes: 1000, MaxFiles: 20}
	many := make([]E, 21)
	for i := range many {
		many[i] = E{Name: "f" + strings.Repeat("x", i)}
	}
	for _, tc := range []struct {
		name   string
		layers [][]E
		want   error
		says   string
	}{
		{"path traversal", [][]E{{{Name: "../../escaped", Body: "x"}}}, imagestore.ErrUnsafe, "climbs out"},
		{"deep traversal", [][]E{{{Name: "a/../../escaped", Body: "x"}}}, imagestore.ErrUnsafe, "climbs out"},
		{"absolute name", [][]E{{{Name: "/tmp/escaped", Body: "x"}}}, imagestore.ErrUnsafe, "absolute"},
		{"char device", [][]E{{{Name: "evil", Type: tar.TypeChar}}}, imagestore.ErrUnsafe, "device node"},
		{"block device", [][]E{{{Name: "sda", Type: tar.TypeBlock}}}, imagestore.ErrUnsafe, "device node"},
		{"fifo", [][]E{{{Name: "pipe", Type: tar.TypeFifo}}}, imagestore.ErrUnsafe, "FIFO"},
		{"escaping symlink", [][]E{{{Name: "up", Type: tar.TypeSymlink, Link: "../../../etc"}}}, imagestore.ErrUnsafe, "climbs out"},
		{"nested escaping symlink", [][]E{{{Name: "a/b/up", Type: tar.TypeSymlink, Link: "../../.."}}}, imagestore.ErrUnsafe, "climbs out"},
		{"absolute hard link", [][]E{{{Name: "pw", Type: tar.TypeLink, Link: "/etc/passwd"}}}, imagestore.ErrUnsafe, "absolute"},
		{"escaping hard link", [][]E{{{Name: "pw", Type: tar.TypeLink, Link: "../../etc/passwd"}}}, imagestore.ErrUnsafe, "outside"},
		{"dangling hard link", [][]E{{{Name: "pw", Type: tar.TypeLink, Link: "nothing"}}}, imagestore.ErrUnsafe, "no regular file"},
		{"mount point as symlink", [][]E{{{Name: "work", Type: tar.TypeSymlink, Link: "/etc"}}}, imagestore.ErrUnsafe, "mounts its own /work"},
		{"mount point as file", [][]E{{{Name: "tmp", Body: "x"}}}, imagestore.ErrUnsafe, "mounts its own /tmp"},
		{"hidden by a whiteout", [][]E{{{Name: "evil", Type: tar.TypeChar}}, {{Name: ".wh.evil"}}}, imagestore.ErrUnsafe, "device node"},
		{"too many bytes", [][]E{{{Name: "big", Body: strings.Repeat("x", 1001)}}}, imagestore.ErrTooLarge, "image_max_bytes"},
		{"too many files", [][]E{many}, imagestore.ErrTooLarge, "image_max_files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var layers []v1.Layer
			for _, l := range tc.layers {
				layers = append(layers, Layer(t, l...))
			}
			s, dir := open(t, lim)
			outside := filepath.Dir(dir)
			_, err := s.Import(context.Background(), SaveDocker(t, Image(t, layers...), "example.com/evil:1"), now)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v, want %v saying %q", err, tc.want, tc.says)
			}
			if list, _ := s.List(); len(list) != 0 {
				t.Fatalf("refused image stored: %+v", list)
			}
			if _, err := s.Resolve("example.com/evil:1"); !errors.Is(err, imagestore.ErrNotFound) {
				t.Fatalf("refused image resolves: %v", err)
			}
			left, _ := filepath.Glob(filepath.Join(dir, "*"))
			if len(left) != 0 {
				t.Fatalf("left in the store: %v", left)
			}
			for _, p := range []string{"escaped", "tmp/escaped"} {
				if _, err := os.Lstat(filepath.Join(outside, p)); !os.IsNotExist(err) {
					t.Fatalf("%s written outside the store", p)
				}
			}
		})
	}
	if _, err := os.Lstat("/tmp/escaped"); !os.IsNotExist(err) {
		t.Fatal("/tmp/escaped was written")
	}
}

// TestImportNeverWritesThroughSymlinks: entries under a symlink to a
// host directory (in the same layer, a lower or an upper one) never land
// in that directory.
func TestImportNeverWritesThroughSymlinks(t *testing.T) {
	host := t.TempDir()
	link := E{Name: "d", Type: tar.TypeSymlink, Link: host}
	under := []E{{Name: "d/x", Body: "pwned"}, {Name: "d/sub/y", Body: "pwned"}}
	for _, tc := range []struct {
		name   string
		layers [][]E
	}{
		{"same layer", [][]E{append([]E{link}, under...)}},
		{"symlink below", [][]E{{link}, under}},
		{"symlink above", [][]E{under, {link}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var layers []v1.Layer
			for _, l := range tc.layers {
				layers = append(layers, Layer(t, l...))
			}
			s, _ := open(t, imagestore.Limits{})
			_, err := s.Import(context.Background(), SaveDocker(t, Image(t, layers...), "example.com/evil:2"), now)
			if err != nil && !errors.Is(err, imagestore.ErrUnsafe) {
				t.Fatalf("err = %v", err)
			}
			if left, _ := os.ReadDir(host); len(left) != 0 {
				t.Fatalf("written through the symlink into %s: %v", host, left)
			}
		})
	}
}
