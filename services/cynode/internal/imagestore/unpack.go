package imagestore

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// MountPoints are where the sandbox mounts trees of its own (the work
// dir, /proc, /dev, /tmp and the privilege-drop helper): an image may hold
// them only as directories, and every unpacked rootfs has them.
var MountPoints = []string{"work", "proc", "dev", "tmp", ".cynode"}

type stats struct {
	bytes         int64
	files, setuid int
}

func unsafeErr(entry, why string) error {
	return fmt.Errorf("%w: entry %q %s; an image may hold regular files, directories and links that stay inside it", ErrUnsafe, entry, why)
}

// checkEntry refuses what may not be unpacked and returns the cleaned
// name ("." for the root).
func checkEntry(h *tar.Header) (string, error) {
	n := h.Name
	switch {
	case n == "" || strings.ContainsRune(n, 0):
		return "", unsafeErr(n, "has an empty name or a NUL")
	case path.IsAbs(n):
		return "", unsafeErr(n, "is an absolute path")
	}
	c := path.Clean(n)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", unsafeErr(n, "climbs out of the image with \"..\"")
	}
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeDir:
	case tar.TypeSymlink:
		t := h.Linkname
		if t == "" || strings.ContainsRune(t, 0) {
			return "", unsafeErr(n, "is a symlink without a target")
		}
		if !path.IsAbs(t) {
			if r := path.Join(path.Dir(c), t); r == ".." || strings.HasPrefix(r, "../") {
				return "", unsafeErr(n, fmt.Sprintf("is a symlink to %q, which climbs out of the image", t))
			}
		}
	case tar.TypeLink:
		t := h.Linkname
		if t == "" || path.IsAbs(t) {
			return "", unsafeErr(n, fmt.Sprintf("is a hard link to %q, an absolute path", t))
		}
		if r := path.Clean(t); r == ".." || strings.HasPrefix(r, "../") || r == "." {
			return "", unsafeErr(n, fmt.Sprintf("is a hard link to %q, outside the image", t))
		}
	case tar.TypeChar, tar.TypeBlock:
		return "", unsafeErr(n, "is a device node")
	case tar.TypeFifo:
		return "", unsafeErr(n, "is a FIFO")
	default:
		return "", unsafeErr(n, fmt.Sprintf("has the unsupported type %q", h.Typeflag))
	}
	if c == "." && h.Typeflag != tar.TypeDir {
		return "", unsafeErr(n, "names the image's root but is not a directory")
	}
	if slices.Contains(MountPoints, c) && h.Typeflag != tar.TypeDir {
		return "", unsafeErr(n, "is not a directory, and the sandbox mounts its own /"+c+" there")
	}
	return c, nil
}

// counter enforces the limits over a stream of entries.
type counter struct {
	lim   Limits
	bytes int64
	files int
}

func (c *counter) add(h *tar.Header) error {
	c.files++
	if h.Typeflag == tar.TypeReg {
		c.bytes += max(h.Size, 0)
	}
	if c.files > c.lim.MaxFiles {
		return fmt.Errorf("%w: more than %d entries (sandbox.image_max_files)", ErrTooLarge, c.lim.MaxFiles)
	}
	if c.bytes > c.lim.MaxBytes {
		return fmt.Errorf("%w: more than %d bytes of files (sandbox.image_max_bytes)", ErrTooLarge, c.lim.MaxBytes)
	}
	return nil
}

// validate checks every entry of every layer, hidden or not, against the
// rules and the limits, before anything is written.
func validate(ctx context.Context, img v1.Image, lim Limits) error {
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("%w: the layers: %v", ErrFormat, err)
	}
	cnt := counter{lim: lim}
	for i, l := range layers {
		if err := validateLayer(ctx, l, &cnt); err != nil {
			return fmt.Errorf("layer %d: %w", i+1, err)
		}
	}
	return nil
}

func validateLayer(ctx context.Context, l v1.Layer, cnt *counter) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrFormat, err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: reading the layer: %v", ErrFormat, err)
		}
		if err := cnt.add(h); err != nil {
			return err
		}
		if _, err := checkEntry(h); err != nil {
			return err
		}
	}
}

// unpack validates img and writes its flattened tree to dst (which must
// not exist).
func unpack(ctx context.Context, img v1.Image, dst string, lim Limits) (stats, error) {
	if err := validate(ctx, img, lim); err != nil {
		return stats{}, err
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		return stats{}, fmt.Errorf("imagestore: %w", err)
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return stats{}, fmt.Errorf("imagestore: %w", err)
	}
	defer root.Close()
	rc := mutate.Extract(img)
	defer rc.Close()
	w := writer{root: root, cnt: counter{lim: lim}}
	tr := tar.NewReader(rc)
	for {
		if err := ctx.Err(); err != nil {
			return stats{}, err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return stats{}, fmt.Errorf("%w: flattening the layers: %v", ErrFormat, err)
		}
		if err := w.entry(h, tr); err != nil {
			return stats{}, err
		}
	}
	if err := w.finish(); err != nil {
		return stats{}, err
	}
	return w.st, nil
}

// writer writes a flattened tree through an os.Root: nothing it opens can
// be outside dst, and no symlink is followed out of it.
type writer struct {
	root  *os.Root
	cnt   counter
	st    stats
	links [][2]string // hard links: name, target, made at the end
}

func (w *writer) entry(h *tar.Header, r io.Reader) error {
	if err := w.cnt.add(h); err != nil {
		return err
	}
	c, err := checkEntry(h)
	if err != nil {
		return err
	}
	perm := fs.FileMode(h.Mode) & fs.ModePerm
	if h.Mode&0o6000 != 0 && h.Typeflag == tar.TypeReg {
		w.st.setuid++
	}
	w.st.files++
	if c == "." {
		return nil
	}
	if dir := path.Dir(c); dir != "." {
		if err := w.root.MkdirAll(dir, 0o755); err != nil {
			return w.escape(c, err)
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if err := w.root.Mkdir(c, perm|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return w.escape(c, err)
		}
		fi, err := w.root.Lstat(c)
		if err != nil || !fi.IsDir() {
			return unsafeErr(h.Name, "is a directory where the image already has another kind of file")
		}
		return w.root.Chmod(c, perm|0o700)
	case tar.TypeReg:
		f, err := w.root.OpenFile(c, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return w.escape(c, err)
		}
		n, err := io.Copy(f, io.LimitReader(r, h.Size))
		if err == nil && n != h.Size {
			err = io.ErrUnexpectedEOF
		}
		if err == nil {
			err = f.Chmod(perm) // never setuid, setgid or sticky
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("imagestore: write %s: %w", c, err)
		}
		w.st.bytes += n
	case tar.TypeSymlink:
		if err := w.root.Symlink(h.Linkname, c); err != nil {
			return w.escape(c, err)
		}
	case tar.TypeLink:
		w.links = append(w.links, [2]string{c, path.Clean(h.Linkname)})
	}
	return nil
}

func (w *writer) escape(c string, err error) error {
	return fmt.Errorf("%w: entry %q cannot be written inside the image (%v): it would leave the rootfs or replace another entry", ErrUnsafe, c, err)
}

// finish makes the hard links (whose targets may come later in the
// flattened stream) and the mount points.
func (w *writer) finish() error {
	for _, l := range w.links {
		fi, err := w.root.Lstat(l[1])
		if err != nil || !fi.Mode().IsRegular() {
			return unsafeErr(l[0], fmt.Sprintf("is a hard link to %q, which is no regular file of the image", l[1]))
		}
		if err := w.root.Link(l[1], l[0]); err != nil {
			return w.escape(l[0], err)
		}
	}
	for _, m := range MountPoints {
		if err := w.root.Mkdir(m, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return w.escape(m, err)
		}
		if fi, err := w.root.Lstat(m); err != nil || !fi.IsDir() {
			return unsafeErr(m, "is not a directory, and the sandbox mounts its own /"+m+" there")
		}
	}
	return nil
}
