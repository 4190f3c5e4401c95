// Package imagestore is the sandboxes' local OCI image store: images the
// operator imports (an OCI image layout directory or a `docker save`
// archive) are flattened with go-containerregistry (layers in order,
// whiteouts and opaque directories applied) and unpacked to a rootfs
// under <dir>/<image id>/rootfs, where the image id is the sha256 of the
// image's config (what `docker images --no-trunc` shows). Refs (tags such
// as docker.io/library/python:3.12) map to ids in <dir>/index.json.
//
// Unpacking is hostile-input safe: every entry of every layer is checked
// before anything is written (so an upper layer cannot hide a bad entry),
// and the flattened tree is written again through an os.Root that never
// leaves the rootfs. Refused: absolute or climbing (`..`) names, device
// nodes, FIFOs and other special files, relative symlinks that climb out
// of the rootfs, hard links that are absolute, climb out or name no
// regular file of the image, the sandbox's mount points (work, proc, dev,
// tmp, .cynode) as anything but directories, and more than Limits bytes
// or files. setuid and setgid bits are stripped (and counted): an
// unpacked rootfs never holds a setuid file. Absolute symlinks (Alpine's
// /bin/sh -> /bin/busybox, Debian's /etc/alternatives) are kept: they are
// only ever resolved inside the sandbox, where the rootfs is /, and the
// store itself never follows a symlink of a rootfs.
package imagestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Errors of the store.
var (
	// ErrNotFound: no imported image has the ref or id.
	ErrNotFound = errors.New("imagestore: image not in the local store")
	// ErrUnsafe: the image holds an entry the store refuses to unpack.
	ErrUnsafe = errors.New("imagestore: unsafe image")
	// ErrTooLarge: the image is over the store's limits.
	ErrTooLarge = errors.New("imagestore: image over the limits")
	// ErrFormat: the source is neither an OCI image layout nor a docker
	// save archive.
	ErrFormat = errors.New("imagestore: not an image archive")
)

// Limits bound one image: the bytes of its regular files and its entries,
// summed over all its layers.
type Limits struct {
	MaxBytes int64
	MaxFiles int
}

// DefaultLimits apply to zero fields.
var DefaultLimits = Limits{MaxBytes: 2 << 30, MaxFiles: 200_000}

// Image is one imported image.
type Image struct {
	// ID is the sha256 of the image config, "sha256:<hex>".
	ID string `json:"image_id"`
	// Refs are its normalized references (index.docker.io/library/x:tag).
	Refs []string `json:"refs"`
	// SizeBytes and Files are what the rootfs holds.
	SizeBytes int64 `json:"size_bytes"`
	Files     int   `json:"files"`
	// SetuidStripped counts files whose setuid/setgid bits were removed.
	SetuidStripped int       `json:"setuid_stripped"`
	Source         string    `json:"source"`
	ImportedAt     time.Time `json:"imported_at"`
	// Rootfs is the unpacked tree (set by the store, not stored).
	Rootfs string `json:"-"`
}

type index struct {
	Images map[string]Image  `json:"images"`
	Refs   map[string]string `json:"refs"`
}

// Store is the image store in one directory.
type Store struct {
	dir string
	lim Limits
	mu  sync.Mutex
}

// Open opens (creating) the store in dir and removes imports a crash left
// half-done.
func Open(dir string, lim Limits) (*Store, error) {
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultLimits.MaxBytes
	}
	if lim.MaxFiles <= 0 {
		lim.MaxFiles = DefaultLimits.MaxFiles
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("imagestore: %w", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "tmp-*"))
	for _, l := range left {
		if err := os.RemoveAll(l); err != nil {
			return nil, fmt.Errorf("imagestore: remove the unfinished import %s: %w", l, err)
		}
	}
	return &Store{dir: dir, lim: lim}, nil
}

// Normalize returns the store's form of ref: an image id "sha256:<hex>" as
// given, a tag reference fully qualified (python:3.12 is
// index.docker.io/library/python:3.12).
func Normalize(ref string) (string, error) {
	if hex, ok := strings.CutPrefix(ref, "sha256:"); ok {
		if _, err := v1.NewHash(ref); err != nil || len(hex) != 64 {
			return "", fmt.Errorf("image id %q is not sha256:<64 hex digits>", ref)
		}
		return ref, nil
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("%q is not an image reference such as docker.io/library/python:3.12: %w", ref, err)
	}
	if _, ok := r.(name.Digest); ok {
		return "", fmt.Errorf("%q names a manifest digest; name the image by tag or by its image id (sha256:… of its config)", ref)
	}
	return r.Name(), nil
}

func (s *Store) readIndex() (index, error) {
	ix := index{Images: map[string]Image{}, Refs: map[string]string{}}
	raw, err := os.ReadFile(filepath.Join(s.dir, "index.json"))
	if errors.Is(err, os.ErrNotExist) {
		return ix, nil
	}
	if err != nil {
		return ix, fmt.Errorf("imagestore: %w", err)
	}
	if err := json.Unmarshal(raw, &ix); err != nil {
		return ix, fmt.Errorf("imagestore: index.json: %w", err)
	}
	if ix.Images == nil {
		ix.Images = map[string]Image{}
	}
	if ix.Refs == nil {
		ix.Refs = map[string]string{}
	}
	return ix, nil
}

func (s *Store) writeIndex(ix index) error {
	raw, err := json.MarshalIndent(ix, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, "index.json.tmp")
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return fmt.Errorf("imagestore: %w", err)
	}
	return os.Rename(tmp, filepath.Join(s.dir, "index.json"))
}

func (s *Store) rootfs(id string) string { return filepath.Join(s.dir, id, "rootfs") }

// Resolve returns the image a ref or image id names.
func (s *Store) Resolve(ref string) (Image, error) {
	n, err := Normalize(ref)
	if err != nil {
		return Image{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ix, err := s.readIndex()
	if err != nil {
		return Image{}, err
	}
	id := n
	if !strings.HasPrefix(n, "sha256:") {
		id = ix.Refs[n]
	}
	im, ok := ix.Images[id]
	if !ok {
		return Image{}, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	im.Rootfs = s.rootfs(id)
	return im, nil
}

// List returns the imported images, by id.
func (s *Store) List() ([]Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ix, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	out := make([]Image, 0, len(ix.Images))
	for id, im := range ix.Images {
		im.Rootfs = s.rootfs(id)
		out = append(out, im)
	}
	slices.SortFunc(out, func(a, b Image) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// source is one image of an archive with the refs it carries.
type source struct {
	img  v1.Image
	refs []string
}

// Import unpacks every image of src (an OCI image layout directory or a
// docker save archive) for this platform and records its refs. An image
// already in the store is not unpacked again (its refs are updated).
func (s *Store) Import(ctx context.Context, src string, now time.Time) ([]Image, error) {
	st, err := os.Stat(src)
	if err != nil {
		return nil, fmt.Errorf("imagestore: %w", err)
	}
	var srcs []source
	if st.IsDir() {
		srcs, err = fromLayout(src)
	} else {
		srcs, err = fromDockerArchive(src)
	}
	if err != nil {
		return nil, err
	}
	if len(srcs) == 0 {
		return nil, fmt.Errorf("%w: %s holds no image for linux/%s", ErrFormat, src, runtime.GOARCH)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Image
	for _, sc := range srcs {
		im, err := s.importOne(ctx, sc, src, now)
		if err != nil {
			return out, err
		}
		out = append(out, im)
	}
	return out, nil
}

func (s *Store) importOne(ctx context.Context, sc source, src string, now time.Time) (Image, error) {
	h, err := sc.img.ConfigName()
	if err != nil {
		return Image{}, fmt.Errorf("%w: %s: the image config: %v", ErrFormat, src, err)
	}
	id := h.String()
	refs := make([]string, 0, len(sc.refs))
	for _, r := range sc.refs {
		n, err := Normalize(r)
		if err != nil {
			return Image{}, fmt.Errorf("%w: %s: %v", ErrFormat, src, err)
		}
		refs = append(refs, n)
	}
	ix, err := s.readIndex()
	if err != nil {
		return Image{}, err
	}
	im, ok := ix.Images[id]
	if _, serr := os.Stat(s.rootfs(id)); !ok || serr != nil {
		tmp, err := os.MkdirTemp(s.dir, "tmp-")
		if err != nil {
			return Image{}, fmt.Errorf("imagestore: %w", err)
		}
		st, err := unpack(ctx, sc.img, filepath.Join(tmp, "rootfs"), s.lim)
		if err != nil {
			_ = os.RemoveAll(tmp)
			return Image{}, fmt.Errorf("%s: %w", src, err)
		}
		_ = os.RemoveAll(filepath.Join(s.dir, id))
		if err := os.Rename(tmp, filepath.Join(s.dir, id)); err != nil {
			_ = os.RemoveAll(tmp)
			return Image{}, fmt.Errorf("imagestore: %w", err)
		}
		im = Image{ID: id, SizeBytes: st.bytes, Files: st.files, SetuidStripped: st.setuid, Source: src, ImportedAt: now.UTC()}
	}
	for _, r := range refs {
		if old, ok := ix.Refs[r]; ok && old != id {
			if o, ok := ix.Images[old]; ok {
				o.Refs = slices.DeleteFunc(o.Refs, func(x string) bool { return x == r })
				ix.Images[old] = o
			}
		}
		ix.Refs[r] = id
		if !slices.Contains(im.Refs, r) {
			im.Refs = append(im.Refs, r)
		}
	}
	slices.Sort(im.Refs)
	ix.Images[id] = im
	if err := s.writeIndex(ix); err != nil {
		return Image{}, err
	}
	im.Rootfs = s.rootfs(id)
	return im, nil
}

// fromDockerArchive reads a docker save archive (manifest.json with
// RepoTags).
func fromDockerArchive(path string) ([]source, error) {
	open := func() (io.ReadCloser, error) { return os.Open(path) }
	m, err := tarball.LoadManifest(tarball.Opener(open))
	if err != nil {
		return nil, fmt.Errorf("%w: %s has no readable manifest.json (%v); pass a docker save archive or an OCI image layout directory (unpack an OCI archive with tar -xf first)", ErrFormat, path, err)
	}
	var out []source
	for i, d := range m {
		var tag *name.Tag
		if len(d.RepoTags) > 0 {
			t, err := name.NewTag(d.RepoTags[0])
			if err != nil {
				return nil, fmt.Errorf("%w: %s: image %d: tag %q: %v", ErrFormat, path, i, d.RepoTags[0], err)
			}
			tag = &t
		} else if len(m) > 1 {
			return nil, fmt.Errorf("%w: %s: image %d has no tag and the archive holds %d images; save each untagged image in its own archive", ErrFormat, path, i, len(m))
		}
		img, err := tarball.Image(tarball.Opener(open), tag)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: image %d: %v", ErrFormat, path, i, err)
		}
		out = append(out, source{img: img, refs: d.RepoTags})
	}
	return out, nil
}

// Annotations that name an image in an OCI layout's index.
const (
	annContainerdName = "io.containerd.image.name"
	annRefName        = "org.opencontainers.image.ref.name"
)

// fromLayout reads an OCI image layout directory: every image of its
// index (nested indexes included) for linux/GOARCH or without a platform.
func fromLayout(dir string) ([]source, error) {
	ii, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not an OCI image layout (%v); pass a directory with index.json and blobs/, or a docker save archive", ErrFormat, dir, err)
	}
	var out []source
	var walk func(ii v1.ImageIndex, refs []string, depth int) error
	walk = func(ii v1.ImageIndex, refs []string, depth int) error {
		if depth > 4 {
			return fmt.Errorf("%w: %s: indexes nested deeper than 4", ErrFormat, dir)
		}
		im, err := ii.IndexManifest()
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrFormat, dir, err)
		}
		for _, d := range im.Manifests {
			if p := d.Platform; p != nil && (p.OS != "linux" || p.Architecture != runtime.GOARCH) {
				continue
			}
			names := refs
			if n := layoutName(d.Annotations); n != "" {
				names = []string{n}
			}
			switch {
			case d.MediaType.IsIndex():
				child, err := ii.ImageIndex(d.Digest)
				if err != nil {
					return fmt.Errorf("%w: %s: %v", ErrFormat, dir, err)
				}
				if err := walk(child, names, depth+1); err != nil {
					return err
				}
			case d.MediaType.IsImage():
				img, err := ii.Image(d.Digest)
				if err != nil {
					return fmt.Errorf("%w: %s: %v", ErrFormat, dir, err)
				}
				out = append(out, source{img: img, refs: names})
			}
		}
		return nil
	}
	if err := walk(ii, nil, 0); err != nil {
		return nil, err
	}
	return out, nil
}

// layoutName is the full reference an index entry's annotations give, or
// "" (a bare tag such as "3.12" names no repository).
func layoutName(a map[string]string) string {
	if n := a[annContainerdName]; n != "" {
		return n
	}
	if n := a[annRefName]; strings.ContainsAny(n, "/:") {
		return n
	}
	return ""
}
