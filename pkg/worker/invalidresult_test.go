package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// TestInvalidResultFailsOnce: a result the CardStore refuses as invalid
// (a raw JSON value holding invalid UTF-8) fails the call with
// internal_error naming the field, instead of a retry that reruns the tool
// for the same refusal.
func TestInvalidResultFailsOnce(t *testing.T) {
	tools := []worker.Tool{
		{Name: "rawvalue", Handler: func(context.Context, *worker.Call) (worker.Result, error) {
			return worker.OK(json.RawMessage("{\"text\":\"a\xffb\"}")), nil
		}},
		{Name: "rawdetail", Handler: func(context.Context, *worker.Call) (worker.Result, error) {
			return worker.Result{}, &card.Error{Code: card.CodeUpstreamUnavailable, Message: "m", Detail: json.RawMessage("[\"\xfe\"]")}
		}},
	}
	h := newHarness(t, worker.Config{}, tools...)
	for _, tc := range []struct{ tool, field string }{{"rawvalue", "content.result.text"}, {"rawdetail", "content.error.detail[0]"}} {
		t.Run(tc.tool, func(t *testing.T) {
			c := h.writeCall(tc.tool, `{}`)
			h.publish(toolSubject(tc.tool), c.command(tc.tool), nil)
			rep, _ := h.awaitReport(c.id)
			_, tr := h.result(rep)
			if rep.Status != card.StatusFailed || tr.Error == nil || tr.Error.Code != card.CodeInternalError ||
				!strings.Contains(tr.Error.Message, tc.field+" holds invalid UTF-8") {
				t.Fatalf("%s: %+v %+v, want failed internal_error naming %s", tc.tool, rep, tr.Error, tc.field)
			}
		})
	}
}
