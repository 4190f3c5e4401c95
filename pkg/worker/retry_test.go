package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// TestHandlerRetryLater: a handler error wrapping ErrRetryLater writes no
// result; the command is redelivered and the next run's result is the
// call's one result.
func TestHandlerRetryLater(t *testing.T) {
	var runs atomic.Int32
	tool := worker.Tool{Name: "flaky", Handler: func(ctx context.Context, c *worker.Call) (worker.Result, error) {
		if runs.Add(1) == 1 {
			return worker.Result{}, fmt.Errorf("%w: the receipt store is briefly away", worker.ErrRetryLater)
		}
		return worker.OK(map[string]int32{"run": runs.Load()}), nil
	}}
	h := newHarness(t, worker.Config{}, tool)
	c := h.writeCall("flaky", `{}`)
	h.publish(toolSubject("flaky"), c.command("flaky"), nil)
	rep, _ := h.awaitReport(c.id)
	if _, tr := h.result(rep); rep.Status != card.StatusSuccess || string(tr.Result) != `{"run":2}` {
		t.Fatalf("after a retry-later run: report %+v result %s, want the second run's success", rep, tr.Result)
	}
}
