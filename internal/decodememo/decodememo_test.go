package decodememo_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/utpmesh/utpmesh/internal/decodememo"
)

// TestGetOnlyForTheSameBytes: a value is returned for its key and exactly
// its bytes; other bytes, another key or a rewrite miss.
func TestGetOnlyForTheSameBytes(t *testing.T) {
	m := decodememo.New[int](8)
	key, data := []byte("k"), []byte(`{"n":1}`)
	m.Put(key, data, 1)
	data[0] = 'X' // Put copied the bytes: the caller's buffer may change
	cases := []struct {
		name      string
		key, data string
		want      int
		hit       bool
	}{
		{"same key and bytes", "k", `{"n":1}`, 1, true},
		{"other bytes", "k", `{"n":2}`, 0, false},
		{"a prefix of the bytes", "k", `{"n":1`, 0, false},
		{"other key", "j", `{"n":1}`, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, ok := m.Get([]byte(tc.key), []byte(tc.data))
			if ok != tc.hit || v != tc.want {
				t.Fatalf("Get(%q, %q) = %d, %v; want %d, %v", tc.key, tc.data, v, ok, tc.want, tc.hit)
			}
		})
	}
	m.Put([]byte("k"), []byte(`{"n":2}`), 2)
	if _, ok := m.Get([]byte("k"), []byte(`{"n":1}`)); ok {
		t.Fatal("the bytes of before the rewrite still hit")
	}
	if v, ok := m.Get([]byte("k"), []byte(`{"n":2}`)); !ok || v != 2 {
		t.Fatalf("the rewrite: %d, %v; want 2, true", v, ok)
	}
}

// TestBounded: a full Memo evicts to take a new key and never holds more
// than its size; rewriting a held key evicts nothing.
func TestBounded(t *testing.T) {
	m := decodememo.New[int](4)
	for i := range 100 {
		m.Put(fmt.Appendf(nil, "k%d", i), []byte{byte(i)}, i)
		if m.Len() > 4 {
			t.Fatalf("%d entries after %d puts, want at most 4", m.Len(), i+1)
		}
	}
	if v, ok := m.Get([]byte("k99"), []byte{99}); !ok || v != 99 {
		t.Fatalf("the newest entry: %d, %v; want 99, true", v, ok)
	}
	for range 10 {
		m.Put([]byte("k99"), []byte{99}, 99)
	}
	if m.Len() != 4 {
		t.Fatalf("%d entries after rewrites of one key, want 4", m.Len())
	}
}

// TestConcurrent: Get and Put from many goroutines (run with -race).
func TestConcurrent(t *testing.T) {
	m := decodememo.New[string](16)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				k := fmt.Appendf(nil, "k%d", (g+i)%32)
				d := fmt.Appendf(nil, "v%d", i%3)
				if v, ok := m.Get(k, d); ok && v != string(d) {
					t.Errorf("Get(%s, %s) = %s", k, d, v)
					return
				}
				m.Put(k, d, string(d))
			}
		}()
	}
	wg.Wait()
}

// TestAgrees: nothing remembered agrees; a remembered value agrees with
// the decoded one when both encode alike, and not otherwise.
func TestAgrees(t *testing.T) {
	m := decodememo.New[int](4)
	enc := func(v int) ([]byte, error) { return fmt.Appendf(nil, "%d", v), nil }
	if err := m.Agrees([]byte("k"), []byte("1"), 1, enc); err != nil {
		t.Fatalf("nothing remembered: %v", err)
	}
	m.Put([]byte("k"), []byte("1"), 1)
	if err := m.Agrees([]byte("k"), []byte("1"), 1, enc); err != nil {
		t.Fatalf("the same value: %v", err)
	}
	if err := m.Agrees([]byte("k"), []byte("1"), 2, enc); err == nil {
		t.Fatal("a memo holding 1 for bytes that decode to 2 agrees")
	}
}
