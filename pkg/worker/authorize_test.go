package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

func TestAuthorizer(t *testing.T) {
	var executed, asked atomic.Int32
	var unavailable atomic.Bool
	unavailable.Store(true)
	az := worker.AuthorizerFunc(func(ctx context.Context, c *worker.Call) error {
		asked.Add(1)
		switch {
		case c.Builtin:
			return nil
		case strings.Contains(string(c.Arguments), "deny"):
			return worker.FailDetail(card.CodeAuthFailed, "mandate does not permit count", map[string]string{"reason": "mandate_scope_violation"})
		case strings.Contains(string(c.Arguments), "flaky") && unavailable.Swap(false):
			return errors.New("policy store unreachable")
		}
		return nil
	})
	h := newHarness(t, worker.Config{Authorizer: az}, countingTool(&executed, `{"ok":true}`))

	c := h.writeCall("count", `{"x":"deny"}`)
	h.publish(toolSubject("count"), c.command("count"), nil)
	rep, _ := h.awaitReport(c.id)
	_, tr := h.result(rep)
	if rep.Status != card.StatusFailed || tr.Error == nil || tr.Error.Code != card.CodeAuthFailed ||
		!strings.Contains(string(tr.Error.Detail), "mandate_scope_violation") {
		t.Fatalf("denied call: report %+v error %+v", rep, tr.Error)
	}
	if executed.Load() != 0 {
		t.Fatal("a denied call ran its handler")
	}

	// An Authorizer that cannot decide leaves the command for redelivery.
	c = h.writeCall("count", `{"x":"flaky"}`)
	h.publish(toolSubject("count"), c.command("count"), nil)
	rep, _ = h.awaitReport(c.id)
	if rep.Status != card.StatusSuccess || executed.Load() != 1 {
		t.Fatalf("after a transient authorizer error: report %+v, executed %d", rep, executed.Load())
	}
	if asked.Load() < 3 {
		t.Fatalf("authorizer asked %d times, want at least 3", asked.Load())
	}
	// The retry gave the claim back: the call did not run, so nothing was
	// taken over from a "dead" execution (that would feed the poison limit
	// and make the redelivery wait out the lease).
	if n := h.rt.Stats()["count"].ClaimTakeovers; n != 0 {
		t.Fatalf("claim take-overs after a transient authorizer error = %d, want 0", n)
	}
}
