package turn

import (
	"context"
	"fmt"
	"io"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
)

// ResumeCall is one tool call in a ResumeReport.
type ResumeCall struct {
	ToolCallID string `json:"tool_call_id"`
	StepID     string `json:"step_id,omitempty"`
	ToolName   string `json:"tool_name,omitempty"`
	// Phase is outstanding, unconsumed or finished (agent.Phase).
	Phase agent.Phase `json:"phase"`
	// Status is the result's status, or StatusPending while outstanding.
	Status string `json:"status"`
	// AfterExecution is the result's effective after_execution.
	AfterExecution card.AfterExecution `json:"after_execution,omitempty"`
	CallCardID     string              `json:"call_card_id,omitempty"`
	ResultCardID   string              `json:"result_card_id,omitempty"`
	// InboxID and InboxState are the call's inbox entry, when it has one:
	// acknowledge an unconsumed call's InboxID once its result is consumed.
	InboxID    string      `json:"inbox_id,omitempty"`
	InboxState inbox.State `json:"inbox_state,omitempty"`
}

// StepState lists the tool_call_ids of one step by phase.
type StepState struct {
	StepID      string   `json:"step_id"`
	Outstanding []string `json:"outstanding"`
	Unconsumed  []string `json:"unconsumed"`
	Finished    []string `json:"finished"`
}

// ResumeReport is what an agent runtime restarting mid-turn needs, in a
// form that prints and serializes: the turn's calls without a result
// (outstanding), with a result not yet acknowledged (unconsumed), and
// done (finished), overall and by step_id. It is agent.TurnState, which
// computes it, flattened.
type ResumeReport struct {
	ProjectID   string `json:"project_id"`
	AgentID     string `json:"agent_id"`
	AgentTurnID string `json:"agent_turn_id"`
	// TurnEpoch is the highest epoch among the turn's cards.
	TurnEpoch   int64        `json:"turn_epoch"`
	Outstanding []ResumeCall `json:"outstanding"`
	Unconsumed  []ResumeCall `json:"unconsumed"`
	Finished    []ResumeCall `json:"finished"`
	// Steps are the turn's steps in the order their first call was written.
	Steps []StepState `json:"steps"`
}

// Resume asks the agent client for the turn's state (agent.Client.Resume:
// the turn's cards and the client agent's inbox entries) and flattens it
// into a ResumeReport.
func Resume(ctx context.Context, c *agent.Client, agentTurnID string) (*ResumeReport, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: turn.Resume: nil agent client", ErrInvalid)
	}
	if err := checkArgs(c.Project(), agentTurnID); err != nil {
		return nil, err
	}
	st, err := c.Resume(ctx, agentTurnID)
	if err != nil {
		return nil, fmt.Errorf("turn: resume %s: %w", agentTurnID, err)
	}
	return NewResumeReport(c.Project(), c.AgentID(), st), nil
}

// NewResumeReport flattens an agent.TurnState.
func NewResumeReport(project, agentID string, st *agent.TurnState) *ResumeReport {
	r := &ResumeReport{ProjectID: project, AgentID: agentID, AgentTurnID: st.AgentTurnID, TurnEpoch: st.TurnEpoch,
		Outstanding: []ResumeCall{}, Unconsumed: []ResumeCall{}, Finished: []ResumeCall{}, Steps: []StepState{}}
	steps := map[string]int{}
	for _, cs := range st.Calls {
		rc := resumeCall(cs)
		i, ok := steps[rc.StepID]
		if !ok {
			i = len(r.Steps)
			steps[rc.StepID] = i
			r.Steps = append(r.Steps, StepState{StepID: rc.StepID, Outstanding: []string{}, Unconsumed: []string{}, Finished: []string{}})
		}
		s := &r.Steps[i]
		switch rc.Phase {
		case agent.PhaseOutstanding:
			r.Outstanding = append(r.Outstanding, rc)
			s.Outstanding = append(s.Outstanding, rc.ToolCallID)
		case agent.PhaseUnconsumed:
			r.Unconsumed = append(r.Unconsumed, rc)
			s.Unconsumed = append(s.Unconsumed, rc.ToolCallID)
		default:
			r.Finished = append(r.Finished, rc)
			s.Finished = append(s.Finished, rc.ToolCallID)
		}
	}
	return r
}

func resumeCall(cs agent.CallState) ResumeCall {
	rc := ResumeCall{ToolCallID: cs.ToolCallID, StepID: cs.StepID, ToolName: cs.ToolName, Phase: cs.Phase,
		Status: StatusPending, AfterExecution: cs.AfterExecution}
	if cs.CallCard != nil {
		rc.CallCardID = cs.CallCard.CardID
	}
	if cs.ResultCard != nil {
		rc.ResultCardID = cs.ResultCard.CardID
		rc.Status = StatusUnreadable
	}
	if cs.Result != nil {
		rc.Status = string(cs.Result.Status)
	}
	if cs.Entry != nil {
		rc.InboxID, rc.InboxState = cs.Entry.InboxID, cs.Entry.State
	}
	return rc
}

// WriteResume writes the report for a person: the counts, then each step
// with its calls and what to do with them.
func WriteResume(w io.Writer, r *ResumeReport) error {
	ew := &errWriter{w: w}
	ew.printf("turn %s · project %s · agent %s · epoch %d\n", r.AgentTurnID, r.ProjectID, r.AgentID, r.TurnEpoch)
	ew.printf("%d outstanding (no result yet) · %d unconsumed (result not acknowledged) · %d finished\n",
		len(r.Outstanding), len(r.Unconsumed), len(r.Finished))
	if len(r.Steps) == 0 {
		ew.printf("no tool calls\n")
		return ew.err
	}
	byID := map[string]ResumeCall{}
	for _, l := range [][]ResumeCall{r.Outstanding, r.Unconsumed, r.Finished} {
		for _, c := range l {
			byID[c.ToolCallID] = c
		}
	}
	for _, s := range r.Steps {
		step := s.StepID
		if step == "" {
			step = "(none)"
		}
		ew.printf("step %s\n", step)
		for _, group := range []struct {
			ids  []string
			what string
		}{
			{s.Outstanding, "outstanding"},
			{s.Unconsumed, "unconsumed "},
			{s.Finished, "finished   "},
		} {
			for _, id := range group.ids {
				c := byID[id]
				ew.printf("  %s  %s  %s  %s", group.what, c.ToolName, c.ToolCallID, c.Status)
				if c.AfterExecution != "" {
					ew.printf(" · %s", c.AfterExecution)
				}
				if c.InboxID != "" {
					ew.printf(" · inbox %s (%s)", c.InboxID, c.InboxState)
				}
				ew.printf("\n")
			}
		}
	}
	return ew.err
}
