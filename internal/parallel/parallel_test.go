package parallel_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/utpmesh/utpmesh/internal/parallel"
)

// TestEach: every iteration runs once, never more than limit at once, and
// the error returned is the lowest failing index's, after all have run.
func TestEach(t *testing.T) {
	for _, tc := range []struct {
		n, limit int
		fail     map[int]bool
		want     string
	}{
		{n: 0, limit: 4},
		{n: 1, limit: 4, fail: map[int]bool{0: true}, want: "iteration 0"},
		{n: 50, limit: 4},
		{n: 50, limit: 0},
		{n: 20, limit: 8, fail: map[int]bool{13: true, 7: true}, want: "iteration 7"},
	} {
		t.Run(fmt.Sprintf("n=%d/limit=%d", tc.n, tc.limit), func(t *testing.T) {
			var running, most, ran atomic.Int64
			counts := make([]atomic.Int64, tc.n)
			err := parallel.Each(tc.n, tc.limit, func(i int) error {
				now := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				counts[i].Add(1)
				ran.Add(1)
				if tc.fail[i] {
					return fmt.Errorf("iteration %d", i)
				}
				return nil
			})
			if got := fmt.Sprint(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
				t.Fatalf("Each = %v, want %q", err, tc.want)
			}
			if ran.Load() != int64(tc.n) {
				t.Fatalf("%d iterations ran, want %d (a failure must not stop the others)", ran.Load(), tc.n)
			}
			for i := range counts {
				if c := counts[i].Load(); c != 1 {
					t.Fatalf("iteration %d ran %d times", i, c)
				}
			}
			if limit := int64(max(tc.limit, 1)); most.Load() > limit {
				t.Fatalf("%d ran at once, limit %d", most.Load(), limit)
			}
		})
	}
}

func ExampleEach() {
	squares := make([]int, 5)
	err := parallel.Each(len(squares), 2, func(i int) error {
		if i < 0 {
			return errors.New("never")
		}
		squares[i] = i * i
		return nil
	})
	fmt.Println(squares, err)
	// Output: [0 1 4 9 16] <nil>
}
