// Package parallel runs the iterations of a loop side by side, a bounded
// number at a time: the reads and compare-and-sets of the replicated
// stores, where each iteration waits for a server round trip.
package parallel

import "sync"

// Each calls fn(i) for every i in [0, n), at most limit at once (at
// least one), waits until every call has returned and returns the error
// of the lowest i whose call failed, or nil. A failure does not stop the
// other calls (fn sees a context's end through its own). A loop of one
// iteration runs it in the caller's goroutine.
func Each(n, limit int, fn func(i int) error) error {
	switch n {
	case 0:
		return nil
	case 1:
		return fn(0)
	}
	errs := make([]error, n)
	sem := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = fn(i)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
