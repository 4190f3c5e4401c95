// Package statetest is the conformance suite of package state: every
// implementation of state.Store runs Run, so code above the interface
// cannot tell them apart.
package statetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/utpmesh/utpmesh/services/state"
)

// Factory returns two handles on one fresh, empty dataset: two processes'
// views of shared state (kvstate: two connections), or the same handle
// twice when the implementation allows one writer (boltstate).
type Factory func(t *testing.T) (a, b state.Store)

// Run runs the suite.
func Run(t *testing.T, open Factory) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, state.Store, state.Store)
	}{
		{"get put delete", testBasics},
		{"keys of any bytes", testKeys},
		{"projects and buckets are separate", testScopes},
		{"scan order, prefix, reverse, stop", testScan},
		{"a transaction sees its own writes", testOwnWrites},
		{"a failed update writes nothing", testRollback},
		{"view is read-only", testReadOnly},
		{"concurrent increments lose nothing", testCounter},
		{"multi-key updates are atomic", testAtomic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := open(t)
			tc.fn(t, a, b)
		})
	}
}

func put(t *testing.T, s state.Store, project, bucket string, kv ...string) {
	t.Helper()
	err := s.Update(context.Background(), func(tx state.Tx) error {
		for i := 0; i+1 < len(kv); i += 2 {
			if err := tx.Bucket(project, bucket).Put(kv[i], []byte(kv[i+1])); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
}

func get(t *testing.T, s state.Store, project, bucket, key string) (string, bool) {
	t.Helper()
	var v []byte
	var found bool
	err := s.View(context.Background(), func(tx state.Tx) error {
		var err error
		v, found, err = tx.Bucket(project, bucket).Get(key)
		v = append([]byte(nil), v...)
		return err
	})
	if err != nil {
		t.Fatalf("view: %v", err)
	}
	return string(v), found
}

func scan(t *testing.T, s state.Store, project, bucket, prefix string, reverse bool) string {
	t.Helper()
	var out []string
	err := s.View(context.Background(), func(tx state.Tx) error {
		out = nil // a View may run its closure again
		return tx.Bucket(project, bucket).Scan(prefix, reverse, func(k string, v []byte) error {
			out = append(out, k+"="+string(v))
			return nil
		})
	})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return strings.Join(out, ",")
}

func testBasics(t *testing.T, a, b state.Store) {
	if _, found := get(t, a, "p", "things", "missing"); found {
		t.Fatal("a missing key is found")
	}
	put(t, a, "p", "things", "k", "v1", "empty", "")
	if v, found := get(t, b, "p", "things", "k"); !found || v != "v1" {
		t.Fatalf("get through the other handle = %q %v", v, found)
	}
	if v, found := get(t, b, "p", "things", "empty"); !found || v != "" {
		t.Fatalf("empty value = %q %v; want found and empty", v, found)
	}
	put(t, b, "p", "things", "k", "v2")
	if v, _ := get(t, a, "p", "things", "k"); v != "v2" {
		t.Fatalf("overwrite = %q", v)
	}
	err := a.Update(context.Background(), func(tx state.Tx) error {
		if err := tx.Bucket("p", "things").Delete("k"); err != nil {
			return err
		}
		return tx.Bucket("p", "things").Delete("never-there")
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, found := get(t, b, "p", "things", "k"); found {
		t.Fatal("a deleted key is found")
	}
	if got := scan(t, b, "p", "things", "", false); got != "empty=" {
		t.Fatalf("after delete scan = %q", got)
	}
}

func testKeys(t *testing.T, a, b state.Store) {
	keys := []string{"plain_key-1", "2024-01-15\x00blk_1", "a.b.c", "=looks-encoded", "spaces and ünïcode", "*", ">", "turn\x00call"}
	var kv []string
	for i, k := range keys {
		kv = append(kv, k, strconv.Itoa(i))
	}
	put(t, a, "proj.with dots", "bucket\x00odd", kv...)
	for i, k := range keys {
		if v, found := get(t, b, "proj.with dots", "bucket\x00odd", k); !found || v != strconv.Itoa(i) {
			t.Errorf("key %q = %q %v", k, v, found)
		}
	}
	if got := scan(t, b, "proj.with dots", "bucket\x00odd", "2024-01-15\x00", false); got != "2024-01-15\x00blk_1=1" {
		t.Errorf("prefix scan with a NUL = %q", got)
	}
}

func testScopes(t *testing.T, a, b state.Store) {
	put(t, a, "p1", "x", "k", "p1x")
	put(t, a, "p1", "y", "k", "p1y")
	put(t, a, "p2", "x", "k", "p2x")
	for _, tc := range []struct{ p, bk, want string }{{"p1", "x", "p1x"}, {"p1", "y", "p1y"}, {"p2", "x", "p2x"}} {
		if v, _ := get(t, b, tc.p, tc.bk, "k"); v != tc.want {
			t.Errorf("%s/%s = %q, want %q", tc.p, tc.bk, v, tc.want)
		}
	}
	if _, found := get(t, b, "p2", "y", "k"); found {
		t.Error("p2/y has p1/y's key")
	}
	var projects []string
	if err := b.View(context.Background(), func(tx state.Tx) error {
		var err error
		projects, err = tx.Projects()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(projects, ",") != "p1,p2" {
		t.Errorf("projects = %v", projects)
	}
}

func testScan(t *testing.T, a, b state.Store) {
	put(t, a, "p", "s", "b1", "2", "a", "1", "b2", "3", "c", "4", "b", "x")
	for _, tc := range []struct {
		prefix  string
		reverse bool
		want    string
	}{
		{"", false, "a=1,b=x,b1=2,b2=3,c=4"},
		{"", true, "c=4,b2=3,b1=2,b=x,a=1"},
		{"b", false, "b=x,b1=2,b2=3"},
		{"b", true, "b2=3,b1=2,b=x"},
		{"zz", false, ""},
		{"c", true, "c=4"},
	} {
		if got := scan(t, b, "p", "s", tc.prefix, tc.reverse); got != tc.want {
			t.Errorf("scan(%q, reverse %v) = %q, want %q", tc.prefix, tc.reverse, got, tc.want)
		}
	}
	if got := scan(t, b, "p", "none", "", false); got != "" {
		t.Errorf("scan of a missing bucket = %q", got)
	}
	var n int
	boom := errors.New("boom")
	err := b.View(context.Background(), func(tx state.Tx) error {
		n = 0
		return tx.Bucket("p", "s").Scan("", false, func(string, []byte) error {
			if n++; n == 2 {
				return state.ErrStop
			}
			return nil
		})
	})
	if err != nil || n != 2 {
		t.Errorf("ErrStop: err %v after %d keys; want nil after 2", err, n)
	}
	err = b.View(context.Background(), func(tx state.Tx) error {
		return tx.Bucket("p", "s").Scan("", false, func(string, []byte) error { return boom })
	})
	if !errors.Is(err, boom) {
		t.Errorf("callback error = %v, want it returned", err)
	}
}

func testOwnWrites(t *testing.T, a, b state.Store) {
	put(t, a, "p", "s", "keep", "1", "gone", "2")
	err := b.Update(context.Background(), func(tx state.Tx) error {
		bk := tx.Bucket("p", "s")
		if err := bk.Put("new", []byte("3")); err != nil {
			return err
		}
		if err := bk.Delete("gone"); err != nil {
			return err
		}
		if v, found, err := bk.Get("new"); err != nil || !found || string(v) != "3" {
			return fmt.Errorf("own put: %q %v %v", v, found, err)
		}
		if _, found, err := bk.Get("gone"); err != nil || found {
			return fmt.Errorf("own delete: found %v %v", found, err)
		}
		var keys []string
		if err := bk.Scan("", false, func(k string, _ []byte) error { keys = append(keys, k); return nil }); err != nil {
			return err
		}
		if strings.Join(keys, ",") != "keep,new" {
			return fmt.Errorf("scan in the transaction = %v, want keep,new", keys)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := scan(t, a, "p", "s", "", false); got != "keep=1,new=3" {
		t.Fatalf("after commit = %q", got)
	}
}

func testRollback(t *testing.T, a, b state.Store) {
	put(t, a, "p", "s", "k", "before")
	boom := errors.New("refused")
	err := b.Update(context.Background(), func(tx state.Tx) error {
		if err := tx.Bucket("p", "s").Put("k", []byte("after")); err != nil {
			return err
		}
		if err := tx.Bucket("p", "other").Put("x", []byte("y")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("update = %v, want the closure's error", err)
	}
	if v, _ := get(t, a, "p", "s", "k"); v != "before" {
		t.Fatalf("k = %q after a failed update", v)
	}
	if _, found := get(t, a, "p", "other", "x"); found {
		t.Fatal("a failed update created a key")
	}
}

func testReadOnly(t *testing.T, a, _ state.Store) {
	err := a.View(context.Background(), func(tx state.Tx) error {
		if tx.Writable() {
			return errors.New("the transaction of View says it is writable")
		}
		if err := tx.Bucket("p", "s").Put("k", []byte("v")); !errors.Is(err, state.ErrReadOnly) {
			return fmt.Errorf("put in View = %v, want ErrReadOnly", err)
		}
		if err := tx.Bucket("p", "s").Delete("k"); !errors.Is(err, state.ErrReadOnly) {
			return fmt.Errorf("delete in View = %v, want ErrReadOnly", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// testCounter increments one key from 8 goroutines over both handles: a
// lost update shows as a smaller total.
func testCounter(t *testing.T, a, b state.Store) {
	const workers, each = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				err := s.Update(context.Background(), func(tx state.Tx) error {
					bk := tx.Bucket("p", "counter")
					v, _, err := bk.Get("n")
					if err != nil {
						return err
					}
					n, _ := strconv.Atoi(string(v))
					return bk.Put("n", []byte(strconv.Itoa(n+1)))
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("increment: %v", err)
	}
	if v, _ := get(t, a, "p", "counter", "n"); v != strconv.Itoa(workers*each) {
		t.Fatalf("counter = %s, want %d", v, workers*each)
	}
}

// testAtomic moves units between two keys in one transaction while
// readers check that the sum never changes.
func testAtomic(t *testing.T, a, b state.Store) {
	put(t, a, "p", "acct", "x", "100", "y", "0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bad := make(chan string, 1)
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for ctx.Err() == nil {
			var x, y int
			err := b.View(ctx, func(tx state.Tx) error {
				bk := tx.Bucket("p", "acct")
				vx, _, err := bk.Get("x")
				if err != nil {
					return err
				}
				vy, _, err := bk.Get("y")
				x, _ = strconv.Atoi(string(vx))
				y, _ = strconv.Atoi(string(vy))
				return err
			})
			if err == nil && x+y != 100 {
				select {
				case bad <- fmt.Sprintf("x %d + y %d != 100", x, y):
				default:
				}
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range 4 {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				err := s.Update(context.Background(), func(tx state.Tx) error {
					bk := tx.Bucket("p", "acct")
					vx, _, err := bk.Get("x")
					if err != nil {
						return err
					}
					vy, _, err := bk.Get("y")
					if err != nil {
						return err
					}
					x, _ := strconv.Atoi(string(vx))
					y, _ := strconv.Atoi(string(vy))
					if err := bk.Put("x", []byte(strconv.Itoa(x-1))); err != nil {
						return err
					}
					return bk.Put("y", []byte(strconv.Itoa(y+1)))
				})
				if err != nil {
					t.Errorf("transfer: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	readers.Wait()
	select {
	case msg := <-bad:
		t.Fatalf("a reader saw a half-applied transaction: %s", msg)
	default:
	}
	if x, _ := get(t, a, "p", "acct", "x"); x != "80" {
		t.Fatalf("x = %s after 20 transfers, want 80", x)
	}
}
