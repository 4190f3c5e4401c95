package agent

import (
	"context"
	"fmt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
)

// Phase is where a tool call of a turn stands.
type Phase string

// The phases of a tool call, as Resume sees them.
const (
	// PhaseOutstanding: a tool.call card and no tool.result card yet; the
	// tool is queued or running (or its command was never published).
	PhaseOutstanding Phase = "outstanding"
	// PhaseUnconsumed: a tool.result card exists and the agent has not
	// acknowledged it: its inbox entry is pending, or the inbox has not
	// stored the report yet (Entry nil).
	PhaseUnconsumed Phase = "unconsumed"
	// PhaseFinished: the result's inbox entry is acknowledged, or stale (it
	// belongs to an older epoch of the turn).
	PhaseFinished Phase = "finished"
)

// CallState is one tool call of a turn.
type CallState struct {
	ToolCallID string
	StepID     string
	ToolName   string
	Phase      Phase
	// CallCard is the tool.call card (nil if the turn has none, e.g. a
	// result written for a command whose card was missing).
	CallCard *card.Card
	// ResultCard and Result are the tool.result card and its content (nil
	// while outstanding; Result is also nil if the content is unreadable).
	ResultCard *card.Card
	Result     *card.ToolResultContent
	// AfterExecution is the effective after_execution of the result ("" while
	// outstanding).
	AfterExecution card.AfterExecution
	// Entry is the call's inbox entry, when the inbox has one; its InboxID
	// is what Ack takes.
	Entry *inbox.Entry
}

// TurnState is what Resume reports about a turn. The three phase lists
// partition Calls; all lists are in the order the calls' first cards were
// written.
type TurnState struct {
	AgentTurnID string
	// TurnEpoch is the highest metadata.turn_epoch among the turn's cards.
	TurnEpoch int64
	// Calls are all the turn's tool calls.
	Calls []CallState
	// Outstanding, Unconsumed and Finished are Calls by phase.
	Outstanding []CallState
	Unconsumed  []CallState
	Finished    []CallState
}

// ByStep groups the turn's calls by step_id, each group in write order.
func (s *TurnState) ByStep() map[string][]CallState {
	out := make(map[string][]CallState)
	for _, c := range s.Calls {
		out[c.StepID] = append(out[c.StepID], c)
	}
	return out
}

// Resume reads what a runtime needs to pick a parked turn up again: the
// turn's cards from the CardStore (cardstore.AllTurn) and the agent's inbox
// entries of the turn, and sorts the turn's tool calls into outstanding
// (no result yet), unconsumed (result not yet acknowledged: consume it,
// then Ack its Entry) and finished. It reads the inbox's pending entries,
// and all of the turn's entries only when a result has no pending entry.
func (c *Client) Resume(ctx context.Context, agentTurnID string) (*TurnState, error) {
	// This client's own lazy acks first: a call it finished has no
	// unconsumed result.
	if err := c.waitAcks(ctx); err != nil {
		return nil, err
	}
	if err := checkID("agent_turn_id", agentTurnID, true); err != nil {
		return nil, err
	}
	// Entries first, cards second: the inbox accepts a report only once its
	// tool.result card is stored, so every entry read here has its card in
	// the card read below. The other order races a result that lands in
	// between (an entry whose card the snapshot missed).
	pending, err := c.turnEntries(ctx, agentTurnID, inbox.StatePending)
	if err != nil {
		return nil, fmt.Errorf("agent: resume turn %s: %w", agentTurnID, err)
	}
	cards, err := cardstore.AllTurn(ctx, c.store, c.project, agentTurnID)
	if err != nil {
		return nil, fmt.Errorf("agent: resume turn %s: read cards: %w", agentTurnID, err)
	}

	st := &TurnState{AgentTurnID: agentTurnID}
	byID := make(map[string]*CallState)
	var order []string
	get := func(id string) *CallState {
		cs, ok := byID[id]
		if !ok {
			cs = &CallState{ToolCallID: id}
			byID[id] = cs
			order = append(order, id)
		}
		return cs
	}
	for _, cd := range cards {
		if cd.Metadata.TurnEpoch > st.TurnEpoch {
			st.TurnEpoch = cd.Metadata.TurnEpoch
		}
		switch cd.Type {
		case card.TypeToolCall:
			cs := get(cd.ToolCallID)
			if cs.CallCard != nil {
				continue // a re-dispatch of the same call; the first card stands
			}
			cs.CallCard = cd
			if cs.StepID == "" {
				cs.StepID = cd.Metadata.StepID
			}
			if tc, err := cd.ToolCall(); err == nil {
				cs.ToolName = tc.ToolName
			}
		case card.TypeToolResult:
			cs := get(cd.ToolCallID)
			if cs.ResultCard != nil {
				continue
			}
			cs.ResultCard = cd
			if cs.StepID == "" {
				cs.StepID = cd.Metadata.StepID
			}
			if cs.ToolName == "" {
				cs.ToolName = cd.Metadata.FunctionName
			}
			if tr, err := cd.ToolResult(); err == nil {
				cs.Result = tr
				cs.AfterExecution = card.EffectiveAfterExecution(tr.Result, tr.AfterExecution)
			} else {
				c.log.Warn("agent: resume: unreadable tool.result card", "agent_turn_id", agentTurnID, "card_id", cd.CardID, "err", err)
			}
		}
	}

	// Attach inbox entries: pending ones first; the turn's other entries
	// only if some result has no pending entry.
	needAll := false
	pendingByCall := make(map[string]*inbox.Entry, len(pending))
	for i := range pending {
		pendingByCall[pending[i].ToolCallID] = &pending[i]
	}
	for _, id := range order {
		cs := byID[id]
		if e := pendingByCall[id]; e != nil {
			cs.Entry = e
		} else if cs.ResultCard != nil {
			needAll = true
		}
	}
	if needAll {
		all, err := c.turnEntries(ctx, agentTurnID, inbox.StateAll)
		if err != nil {
			return nil, fmt.Errorf("agent: resume turn %s: %w", agentTurnID, err)
		}
		for i := range all {
			// Only for results the card read holds: this read comes after
			// it, so an entry of a call whose result the card read missed
			// (its result and entry committed in between; on a single node
			// they are one commit) is newer than the snapshot, where the
			// call is still outstanding.
			if cs := byID[all[i].ToolCallID]; cs != nil && cs.Entry == nil && cs.ResultCard != nil {
				cs.Entry = &all[i]
			}
		}
	}
	// A pending entry whose result card is not among the turn's cards (it
	// should not happen: the inbox checks the card's turn) is still listed.
	for i := range pending {
		e := &pending[i]
		if _, ok := byID[e.ToolCallID]; ok {
			continue
		}
		cs := get(e.ToolCallID)
		cs.Entry, cs.StepID, cs.ToolName = e, e.StepID, e.ToolName
		if rc, tr, err := c.readResult(ctx, agentTurnID, e.ToolCallID, e.ToolResultCardID); err == nil {
			cs.ResultCard, cs.Result = rc, tr
			cs.AfterExecution = card.EffectiveAfterExecution(tr.Result, tr.AfterExecution)
		}
	}

	for _, id := range order {
		cs := byID[id]
		switch {
		case cs.ResultCard == nil && cs.Entry == nil:
			cs.Phase = PhaseOutstanding
			st.Outstanding = append(st.Outstanding, *cs)
		case cs.Entry == nil || cs.Entry.State == inbox.StatePending:
			cs.Phase = PhaseUnconsumed
			st.Unconsumed = append(st.Unconsumed, *cs)
		default:
			cs.Phase = PhaseFinished
			st.Finished = append(st.Finished, *cs)
		}
		st.Calls = append(st.Calls, *cs)
	}
	return st, nil
}
