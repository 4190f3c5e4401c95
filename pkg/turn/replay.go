package turn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// ReplayOptions tune PlanReplay and Replay.
type ReplayOptions struct {
	// NewTurnID is the agent_turn_id the calls are re-executed under;
	// default "replay-" followed by a new UUIDv7. It must differ from the
	// replayed turn's id: the original cards are never touched.
	NewTurnID string
	// Concurrency is how many calls run at once (default 1: one after
	// the other, in the original order). Calls run concurrently only
	// within a run of consecutive calls of the same epoch; see Replay.
	Concurrency int
	// Progress, when set, is called after each call ends with the number
	// of calls done and the total. Calls to it are serialized.
	Progress func(done, total int)
	// Mandate, when set, replaces every call's recorded mandate (one that
	// has expired since, say). Empty: each call carries its own.
	Mandate string
	// Known are mandate tokens the caller holds: a recorded call that kept
	// only its mandate's SHA-256 (an admitted call: the mesh stores no
	// token in a card) is replayed with the one of them that hashes to it,
	// i.e. with its recorded mandate. Mandate, when set, wins.
	Known []string
}

// Step is one call of a replay plan.
type Step struct {
	// Seq is the call's position in the original turn (Call.Seq).
	Seq        int    `json:"seq"`
	ToolCallID string `json:"tool_call_id"`
	ToolName   string `json:"tool_name"`
	StepID     string `json:"step_id,omitempty"`
	// ParentStepID is the original call's parent step.
	ParentStepID string `json:"parent_step_id,omitempty"`
	// TurnEpoch is the epoch the call is replayed at: the original call's
	// epoch, raised to the highest epoch of the calls before it (see
	// Replay). OriginalEpoch is the recorded one.
	TurnEpoch     int64 `json:"turn_epoch"`
	OriginalEpoch int64 `json:"original_epoch"`
	// Arguments are the recorded arguments.
	Arguments json.RawMessage `json:"arguments"`
	// CreatedAt is the original tool.call card's created_at, which the new
	// tool.call card gets too.
	CreatedAt time.Time `json:"created_at"`
	// HasMandate reports that the original call's mandate is carried over.
	HasMandate bool `json:"has_mandate,omitempty"`
	// Recorded is the original outcome the replayed one is compared with.
	Recorded Snapshot `json:"recorded"`

	mandate string
}

// Skip is a call of the turn that a plan leaves out, and why.
type Skip struct {
	ToolCallID string `json:"tool_call_id"`
	Reason     string `json:"reason"`
}

// Plan is what Replay will do: which calls, under which turn id, in
// which order.
type Plan struct {
	ProjectID    string `json:"project_id"`
	SourceTurnID string `json:"source_turn_id"`
	NewTurnID    string `json:"new_turn_id"`
	Steps        []Step `json:"steps"`
	Skipped      []Skip `json:"skipped"`
}

// Snapshot is the comparable outcome of a call: what Replay diffs.
type Snapshot struct {
	// Status is the UTP status, or StatusPending for a recorded call that
	// had no result.
	Status         string              `json:"status"`
	AfterExecution card.AfterExecution `json:"after_execution,omitempty"`
	ErrorCode      card.ErrorCode      `json:"error_code,omitempty"`
	Result         json.RawMessage     `json:"result,omitempty"`
	// ResultCardID is the tool.result card the snapshot was read from.
	ResultCardID string `json:"result_card_id,omitempty"`
}

// document is the JSON the diff compares: paths are /status,
// /after_execution, /error_code and /result/….
func (s Snapshot) document() json.RawMessage {
	doc := map[string]any{"status": s.Status}
	if s.AfterExecution != "" {
		doc["after_execution"] = s.AfterExecution
	}
	if s.ErrorCode != "" {
		doc["error_code"] = s.ErrorCode
	}
	if len(s.Result) > 0 {
		doc["result"] = s.Result
	}
	raw, err := json.Marshal(doc)
	if err != nil { // a result that is not valid JSON: compare it as a string
		doc["result"] = string(s.Result)
		raw, _ = json.Marshal(doc)
	}
	return raw
}

func recorded(c *Call) Snapshot {
	s := Snapshot{Status: c.Status, AfterExecution: c.AfterExecution, Result: c.Result, ResultCardID: c.ResultCardID}
	if c.Error != nil {
		s.ErrorCode = c.Error.Code
	}
	return s
}

// PlanReplay returns the plan of replaying t: every call that has its
// tool.call card, in the original order, under opts.NewTurnID. Calls
// without a tool.call card are Skipped (their arguments are unknown). A
// turn with nothing to replay is ErrNotReplayable.
func PlanReplay(t *Turn, opts ReplayOptions) (*Plan, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: turn.PlanReplay: nil turn", ErrInvalid)
	}
	newID := opts.NewTurnID
	if newID == "" {
		newID = "replay-" + card.NewID()
	}
	if newID == t.AgentTurnID {
		return nil, fmt.Errorf("%w: the new turn id %q is the replayed turn's own id; replay runs under a new turn so the original cards stay untouched", ErrInvalid, newID)
	}
	if err := checkArgs(t.ProjectID, newID); err != nil {
		return nil, err
	}
	p := &Plan{ProjectID: t.ProjectID, SourceTurnID: t.AgentTurnID, NewTurnID: newID, Steps: []Step{}, Skipped: []Skip{}}
	var epoch int64
	for i := range t.Calls {
		c := &t.Calls[i]
		if c.CallCard == nil || c.ToolName == "" {
			p.Skipped = append(p.Skipped, Skip{ToolCallID: c.ToolCallID, Reason: "no readable tool.call card: the arguments are unknown"})
			continue
		}
		epoch = max(epoch, c.TurnEpoch)
		hasMandate, mandate := c.HasMandate, c.Mandate
		if mandate == "" && c.MandateSHA256 != "" {
			mandate = knownMandate(opts.Known, c.MandateSHA256)
		}
		if opts.Mandate != "" {
			hasMandate, mandate = true, opts.Mandate
		}
		p.Steps = append(p.Steps, Step{
			Seq: c.Seq, ToolCallID: c.ToolCallID, ToolName: c.ToolName, StepID: c.StepID, ParentStepID: c.ParentStepID,
			TurnEpoch: epoch, OriginalEpoch: c.TurnEpoch, Arguments: c.Arguments, CreatedAt: c.CalledAt,
			HasMandate: hasMandate, mandate: mandate, Recorded: recorded(c),
		})
	}
	if len(p.Steps) == 0 {
		return p, fmt.Errorf("%w: turn %s has %d calls and none has a readable tool.call card", ErrNotReplayable, t.AgentTurnID, len(t.Calls))
	}
	return p, nil
}

// ReplayedCall is the outcome of one replayed call.
type ReplayedCall struct {
	Step Step `json:"step"`
	// Replayed is the new outcome (nil when the call could not be made:
	// see Error).
	Replayed *Snapshot `json:"replayed,omitempty"`
	// Equal reports that the new outcome equals the recorded one: same
	// status, after_execution, error code and result (structurally).
	Equal bool `json:"equal"`
	// Changes say where they differ (paths /status, /after_execution,
	// /error_code, /result/…).
	Changes []Change `json:"changes,omitempty"`
	// Error is why the call could not be made or its result not read
	// (an unknown tool, the mesh unreachable); "" otherwise. A tool that
	// fails is not an Error: its failure is its outcome.
	Error string `json:"error,omitempty"`
	// Duration is the wall-clock time of the replayed call.
	Duration time.Duration `json:"duration_ns"`
}

// Report is the outcome of Replay.
type Report struct {
	Plan *Plan `json:"plan"`
	// AgentID is the agent the calls were made as.
	AgentID string         `json:"agent_id"`
	Calls   []ReplayedCall `json:"calls"`
	// Equal, Different and Errors count Calls: equal outcomes, different
	// outcomes, and calls that could not be made.
	Equal     int `json:"equal"`
	Different int `json:"different"`
	Errors    int `json:"errors"`
}

// AllEqual reports whether every call was made and came out equal.
func (r *Report) AllEqual() bool { return r.Different == 0 && r.Errors == 0 && len(r.Calls) > 0 }

// Replay re-executes the turn's tool calls against the workers running
// now, through client (agent.Client.Call), under a new turn id, and diffs
// each new outcome against the recorded one. The original cards are never
// touched: each call gets a new tool.call card in the new turn with the
// original tool_call_id, arguments, step ids, created_at and mandate.
//
// Calls run in the original order, Concurrency at a time. A call never runs
// at an epoch lower than a call before it (the inbox would make its report
// stale and the call would wait forever), so a call recorded at a lower
// epoch is replayed at the highest epoch so far, and calls of different
// epochs never overlap.
//
// A call that cannot be made is recorded in its ReplayedCall.Error and the
// replay goes on. When ctx ends, Replay stops starting calls and returns
// the report so far with ctx's error.
func Replay(ctx context.Context, client *agent.Client, t *Turn, opts ReplayOptions) (*Report, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: turn.Replay: nil agent client", ErrInvalid)
	}
	if opts.Concurrency < 0 {
		return nil, fmt.Errorf("%w: concurrency %d is negative; use 1 (the default) to replay one call at a time", ErrInvalid, opts.Concurrency)
	}
	conc := max(opts.Concurrency, 1)
	p, err := PlanReplay(t, opts)
	if err != nil {
		return nil, err
	}
	if client.Project() != t.ProjectID {
		return nil, fmt.Errorf("%w: the agent client works in project %s, the turn is in project %s", ErrInvalid, client.Project(), t.ProjectID)
	}
	r := &Report{Plan: p, AgentID: client.AgentID(), Calls: make([]ReplayedCall, len(p.Steps))}
	var (
		mu   sync.Mutex
		done int
	)
	runOne := func(i int) {
		rc := replayOne(ctx, client, p.NewTurnID, p.Steps[i])
		mu.Lock()
		defer mu.Unlock()
		r.Calls[i] = rc
		done++
		if opts.Progress != nil {
			opts.Progress(done, len(p.Steps))
		}
	}
	started := 0
	for start := 0; start < len(p.Steps) && ctx.Err() == nil; {
		end := start + 1 // a run of calls of one epoch
		for end < len(p.Steps) && p.Steps[end].TurnEpoch == p.Steps[start].TurnEpoch {
			end++
		}
		sem := make(chan struct{}, conc)
		var wg sync.WaitGroup
		for i := start; i < end && ctx.Err() == nil; i++ {
			sem <- struct{}{}
			started = i + 1
			wg.Go(func() {
				defer func() { <-sem }()
				runOne(i)
			})
		}
		wg.Wait()
		start = end
	}
	r.Calls = r.Calls[:started]
	for i := range r.Calls {
		switch c := &r.Calls[i]; {
		case c.Error != "":
			r.Errors++
		case c.Equal:
			r.Equal++
		default:
			r.Different++
		}
	}
	if err := ctx.Err(); err != nil {
		return r, fmt.Errorf("turn: replay of %s stopped after %d of %d calls: %w", t.AgentTurnID, started, len(p.Steps), err)
	}
	return r, nil
}

func replayOne(ctx context.Context, client *agent.Client, newTurn string, s Step) ReplayedCall {
	rc := ReplayedCall{Step: s}
	begin := time.Now()
	out, err := client.Call(ctx, agent.CallRequest{
		ToolName: s.ToolName, Arguments: s.Arguments, AgentTurnID: newTurn, TurnEpoch: s.TurnEpoch,
		StepID: s.StepID, ParentStepID: s.ParentStepID, ToolCallID: s.ToolCallID,
		Mandate: s.mandate, CreatedAt: s.CreatedAt,
	})
	rc.Duration = time.Since(begin)
	if out == nil || out.Result == nil {
		if err == nil {
			err = errors.New("no outcome")
		}
		rc.Error = err.Error()
		return rc
	}
	// An outcome with ErrNotAcked is still a valid outcome; the entry stays
	// pending in the replay agent's inbox, which is harmless.
	snap := Snapshot{Status: string(out.Result.Status), AfterExecution: out.AfterExecution, Result: out.Result.Result}
	if out.ResultCard != nil {
		snap.ResultCardID = out.ResultCard.CardID
	}
	if out.Result.Error != nil {
		snap.ErrorCode = out.Result.Error.Code
	}
	rc.Replayed = &snap
	changes, derr := Diff(s.Recorded.document(), snap.document())
	if derr != nil {
		rc.Error = "diff: " + derr.Error()
		return rc
	}
	rc.Changes, rc.Equal = changes, len(changes) == 0
	return rc
}

// knownMandate returns the token of known whose hex SHA-256 is sum, or "".
func knownMandate(known []string, sum string) string {
	for _, k := range known {
		h := sha256.Sum256([]byte(k))
		if hex.EncodeToString(h[:]) == sum {
			return k
		}
	}
	return ""
}
