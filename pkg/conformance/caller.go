package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
)

// Caller is the Go SDK's implementation of the agent program contract
// (`utpmesh conformance caller`): it reads one AgentRequest from in, makes
// its calls together with ac (a re-made call keeps its tool_call_id, so a
// re-run of the same request finds the calls the turn already has), and
// writes one AgentLine per call to out as its result arrives, or
// "pending" for the calls without a result after wait_ms.
func Caller(ctx context.Context, ac *agent.Client, in io.Reader, out io.Writer) error {
	var req AgentRequest
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		return fmt.Errorf("%w: stdin: %v (want {\"agent_turn_id\",\"wait_ms\",\"calls\":[{\"tool_call_id\",\"tool_name\",\"arguments\"}]})", ErrConfig, err)
	}
	if req.AgentTurnID == "" || req.WaitMS <= 0 {
		return fmt.Errorf("%w: stdin: agent_turn_id and a positive wait_ms are required", ErrConfig)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(req.WaitMS)*time.Millisecond)
	defer cancel()
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	var wg sync.WaitGroup
	errs := make([]error, len(req.Calls))
	for i, c := range req.Calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			line := AgentLine{ToolCallID: c.ToolCallID}
			oc, err := ac.Call(ctx, agent.CallRequest{ToolName: c.ToolName, Arguments: c.Arguments, AgentTurnID: req.AgentTurnID, ToolCallID: c.ToolCallID})
			var pe *agent.PendingError
			switch {
			case errors.As(err, &pe), oc == nil && ctx.Err() != nil: // no result within wait_ms
				line.Status = StatusPending
			case oc == nil:
				errs[i] = fmt.Errorf("call %s: %w", c.ToolCallID, err)
				return
			default: // err is at most ErrNotAcked: the outcome is valid
				line.Status, line.Result, line.Error = string(oc.Result.Status), oc.Result.Result, oc.Result.Error
			}
			mu.Lock()
			defer mu.Unlock()
			errs[i] = enc.Encode(line)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
