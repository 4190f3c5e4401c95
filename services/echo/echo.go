// Package echo is the mesh's demo tool: it returns its arguments unchanged.
// It exists for smoke tests ("is the mesh working?") and benchmarks; it has no
// side effects. An argument "sleep_ms" (0–60000) makes it wait first, which
// tests use to exercise timeouts and cancellation.
package echo

import (
	"context"
	"encoding/json"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// Name is the tool name of echo.
const Name = "echo"

// Parameters is echo's argument schema: any object; sleep_ms optional.
const Parameters = `{"type":"object","properties":{"sleep_ms":{"type":"integer","minimum":0,"maximum":60000}}}`

// Tool returns the echo tool.
func Tool() worker.Tool {
	return worker.Tool{
		Name:           Name,
		Description:    "Returns its arguments unchanged (demo and smoke-test tool). Optional sleep_ms waits first.",
		Parameters:     json.RawMessage(Parameters),
		AfterExecution: card.Suspend,
		Handler:        handle,
	}
}

func handle(ctx context.Context, call *worker.Call) (worker.Result, error) {
	var a struct {
		SleepMS int `json:"sleep_ms"`
	}
	if err := call.Bind(&a); err != nil {
		return worker.Result{}, err
	}
	if a.SleepMS > 0 {
		t := time.NewTimer(time.Duration(a.SleepMS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return worker.Result{}, ctx.Err()
		}
	}
	return worker.OK(json.RawMessage(call.Arguments)), nil
}
