// Package blobtest is the conformance suite of package blob: every
// implementation of blob.Store runs Run, so code above the interface
// cannot tell them apart.
package blobtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/utpmesh/utpmesh/services/state/blob"
)

// Limit is the size limit Run opens its stores with.
const Limit = 300 << 10

// Factory returns two handles on one fresh, empty store whose size limit
// is maxBytes: two processes' views of shared blobs (objblob: two
// connections, to two nodes of a cluster), or the same handle twice when
// the implementation has one process (dirblob).
type Factory func(t *testing.T, maxBytes int64) (a, b blob.Store)

// Run runs the suite.
func Run(t *testing.T, open Factory) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, blob.Store, blob.Store)
	}{
		{"put and get, through the other handle", testRoundTrip},
		{"empty and multi-chunk content", testSizes},
		{"a name is written once", testWriteOnce},
		{"concurrent puts of one name keep one whole blob", testConcurrent},
		{"delete", testDelete},
		{"bad names are refused", testNames},
		{"content over the limit is refused", testLimit},
		{"closed", testClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := open(t, Limit)
			tc.fn(t, a, b)
		})
	}
}

var ctx = context.Background()

func mustPut(t *testing.T, s blob.Store, name string, content []byte) {
	t.Helper()
	if err := s.Put(ctx, name, content); err != nil {
		t.Fatalf("put %s: %v", name, err)
	}
}

func mustGet(t *testing.T, s blob.Store, name string, want []byte) {
	t.Helper()
	got, err := s.Get(ctx, name)
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("get %s: %d bytes, want the %d bytes written", name, len(got), len(want))
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7+i/251)
	}
	return b
}

func testRoundTrip(t *testing.T, a, b blob.Store) {
	c := []byte("# Report\nhello\n")
	name := blob.SHA256Name("artifact", c)
	mustPut(t, a, name, c)
	mustGet(t, a, name, c)
	mustGet(t, b, name, c)
	if _, err := b.Get(ctx, "artifact-missing"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("get of a missing name = %v, want ErrNotFound", err)
	}
}

func testSizes(t *testing.T, a, b blob.Store) {
	for _, n := range []int{0, 1, 128 << 10, 128<<10 + 1, Limit} {
		c := pattern(n, byte(n))
		name := fmt.Sprintf("size-%d", n)
		mustPut(t, a, name, c)
		mustGet(t, b, name, c)
	}
}

func testWriteOnce(t *testing.T, a, b blob.Store) {
	mustPut(t, a, "x", []byte("first"))
	mustPut(t, b, "x", []byte("second, ignored"))
	mustGet(t, a, "x", []byte("first"))
	mustGet(t, b, "x", []byte("first"))
}

func testConcurrent(t *testing.T, a, b blob.Store) {
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Put(ctx, "same", pattern(200<<10, byte(i)))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent put: %v", err)
		}
	}
	got, err := a.Get(ctx, "same")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if bytes.Equal(got, pattern(200<<10, byte(i))) {
			mustGet(t, b, "same", got)
			return
		}
	}
	t.Fatalf("the stored blob (%d bytes) is none of the contents written", len(got))
}

func testDelete(t *testing.T, a, b blob.Store) {
	c := pattern(200<<10, 3)
	mustPut(t, a, "d", c)
	if err := b.Delete(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []blob.Store{a, b} {
		if _, err := s.Get(ctx, "d"); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("get after delete = %v, want ErrNotFound", err)
		}
	}
	if err := a.Delete(ctx, "d"); err != nil {
		t.Fatalf("delete of a missing name = %v, want nil", err)
	}
	// The name can be written again.
	mustPut(t, a, "d", []byte("again"))
	mustGet(t, b, "d", []byte("again"))
}

func testNames(t *testing.T, a, _ blob.Store) {
	for _, name := range []string{"", ".hidden", "a/b", "a b", "a\x00b", "..", "ü", strings.Repeat("x", blob.MaxNameBytes+1), "a.>", "a*"} {
		if err := a.Put(ctx, name, []byte("x")); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("put %q = %v, want ErrInvalidName", name, err)
		}
		if _, err := a.Get(ctx, name); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("get %q = %v, want ErrInvalidName", name, err)
		}
		if err := a.Delete(ctx, name); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("delete %q = %v, want ErrInvalidName", name, err)
		}
	}
	mustPut(t, a, "ok.Name_1-"+strings.Repeat("x", blob.MaxNameBytes-10), []byte("x"))
}

func testLimit(t *testing.T, a, b blob.Store) {
	err := a.Put(ctx, "big", make([]byte, Limit+1))
	if !errors.Is(err, blob.ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprint(Limit)) {
		t.Fatalf("put over the limit = %v, want ErrTooLarge naming the limit", err)
	}
	if _, err := b.Get(ctx, "big"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("a refused put stored something: %v", err)
	}
}

func testClosed(t *testing.T, a, _ blob.Store) {
	mustPut(t, a, "c", []byte("x"))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second close = %v", err)
	}
	if _, err := a.Get(ctx, "c"); !errors.Is(err, blob.ErrClosed) {
		t.Fatalf("get after close = %v, want ErrClosed", err)
	}
	if err := a.Put(ctx, "c2", nil); !errors.Is(err, blob.ErrClosed) {
		t.Fatalf("put after close = %v, want ErrClosed", err)
	}
}
