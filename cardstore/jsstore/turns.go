package jsstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
)

// turnRecord is a turn's summary as stored on its summary subject.
type turnRecord = cardstore.TurnSummary

// turnIndex is one turn index record: the ids of the turn's cards one Put
// wrote, in Put order.
type turnIndex struct {
	IDs []string `json:"ids"`
}

// turnList is one record of a project's (or an agent's) turn list: the
// turns one Put started (or learnt the agent of), oldest first, and the
// stream sequence of the list's previous record (0: none). The records
// form a chain from the newest back to the first, which ListTurns walks.
type turnList struct {
	Turns []string `json:"turns"`
	Prev  uint64   `json:"prev,omitempty"`
}

// listRecord returns the record that appends turns to the list on
// subject, chained to (and guarded by a compare-and-set on) its newest
// record.
func (s *Store) listRecord(ctx context.Context, pre prefetch, subject string, turns []string) (*nats.Msg, error) {
	head, err := s.lastOf(ctx, pre, subject)
	if err != nil {
		return nil, err
	}
	var prev uint64
	if head != nil {
		prev = head.seq
	}
	data, err := json.Marshal(turnList{Turns: turns, Prev: prev})
	if err != nil {
		return nil, fmt.Errorf("jsstore: encode turn list: %w", err)
	}
	return expect(record(subject, data), prev), nil
}

// staleRetries bounds how often ListTurn re-reads a turn index that a
// lagging replica answered (replicated streams only).
const staleRetries = 40

// ListTurn returns one page of a turn's cards in write order. Limit 0 or
// above cardstore.MaxPage means MaxPage; a negative Limit is ErrInvalid.
// Next is the position of the page's last card when more cards follow,
// else 0; positions are opaque (see the package documentation).
func (s *Store) ListTurn(ctx context.Context, req cardstore.ListTurnRequest) (*cardstore.ListTurnResult, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	limit, err := cardstore.CheckListTurn(req)
	if err != nil {
		return nil, err
	}
	leave, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	return s.listTurn(ctx, req, limit)
}

// listTurn is ListTurn after its checks, with the page limit resolved.
func (s *Store) listTurn(ctx context.Context, req cardstore.ListTurnRequest, limit int) (*cardstore.ListTurnResult, error) {
	subject := s.lay.turn(req.ProjectID, req.AgentTurnID)
	// On a replicated stream, the leader's newest index record of the turn
	// is the fence: a page read from a replica that has not reached it
	// (and is not full) is read again.
	var fence uint64
	if s.leaderReads {
		head, err := s.leaderGet(ctx, map[string]any{"last_by_subj": subject})
		if err != nil {
			return nil, err
		}
		if head == nil {
			return &cardstore.ListTurnResult{}, nil
		}
		fence = head.seq
	}
	var ids []string
	var poss []uint64
	var err error
	for attempt := 0; ; attempt++ {
		var last uint64
		ids, poss, last, err = s.readTurnIndex(ctx, subject, req.After, limit+1)
		if err != nil {
			return nil, err
		}
		if len(ids) > limit || last >= fence {
			break
		}
		if attempt == staleRetries {
			return nil, fmt.Errorf("%w: the replicas answering reads of stream %s stay behind its leader (turn index at sequence %d, leader at %d)", ErrUnavailable, s.cfg.Stream, last, fence)
		}
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
	}
	res := &cardstore.ListTurnResult{}
	if len(ids) > limit {
		ids, poss = ids[:limit], poss[:limit]
		res.Next = poss[limit-1]
	}
	subjects := make([]string, len(ids))
	for i, id := range ids {
		subjects[i] = s.lay.card(req.ProjectID, id)
	}
	stored, err := s.lastMany(ctx, subjects, true)
	if err != nil {
		return nil, err
	}
	for i, m := range stored {
		if m == nil {
			return nil, fmt.Errorf("jsstore: turn index of agent_turn_id %q in project %s names card %s, which is missing", req.AgentTurnID, req.ProjectID, ids[i])
		}
		c, err := decodeCard(m)
		if err != nil {
			return nil, err
		}
		res.Cards = append(res.Cards, c)
	}
	return res, nil
}

// readTurnIndex reads up to want card ids of the turn index on subject
// after position after, with their positions; last is the sequence of the
// last index record read.
func (s *Store) readTurnIndex(ctx context.Context, subject string, after uint64, want int) (ids []string, poss []uint64, last uint64, err error) {
	afterSeq, afterIdx := splitPos(after)
	seq, last := max(afterSeq, 1), afterSeq
	for len(ids) < want {
		ms, pending, err := s.direct(ctx, directReq{Seq: seq, NextFor: subject, Batch: min(want-len(ids), maxMulti)})
		if err != nil {
			return nil, nil, 0, err
		}
		for _, m := range ms {
			var ti turnIndex
			if err := json.Unmarshal(m.data, &ti); err != nil {
				return nil, nil, 0, fmt.Errorf("jsstore: stored turn index record %d is corrupt: %w", m.seq, err)
			}
			for i, id := range ti.IDs {
				if after > 0 && m.seq == afterSeq && i <= afterIdx {
					continue
				}
				ids = append(ids, id)
				poss = append(poss, pos(m.seq, i))
			}
			last, seq = m.seq, m.seq+1
		}
		if pending == 0 || len(ms) == 0 {
			break
		}
	}
	return ids, poss, last, nil
}

// ListTurns returns one page of the project's turns, newest first. Limit
// 0 or above cardstore.MaxPage means MaxPage; a negative Limit, or an
// AgentID longer than card.MaxIDLen bytes, not valid UTF-8 or holding a
// NUL, is ErrInvalid. Next is the position of the page's last turn when
// older turns follow, else 0.
func (s *Store) ListTurns(ctx context.Context, req cardstore.ListTurnsRequest) (*cardstore.ListTurnsResult, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	limit, err := cardstore.CheckListTurns(req)
	if err != nil {
		return nil, err
	}
	leave, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	subject := s.lay.turnList(req.ProjectID)
	if req.AgentID != "" {
		subject = s.lay.agentList(req.ProjectID, req.AgentID)
	}
	// Find the list record to start from and the index below which to
	// take its turns.
	var m *msg
	from := 0
	if req.Before == 0 {
		if m, err = s.readLast(ctx, subject, true); err != nil {
			return nil, err
		}
	} else {
		seq, i := splitPos(req.Before)
		if m, err = s.readSeq(ctx, seq); err != nil {
			return nil, err
		}
		if m == nil || m.subject != subject {
			return nil, cardstore.Invalid("cursor %d names no turn of this list (pass the Next of a page of the same project and agent filter)", req.Before)
		}
		from = i
	}
	// Walk the chain newest first, a batch of candidates at a time, and
	// keep the turns that still have a summary: a turn removed by
	// DeleteTurn stays named in the list records but has none.
	first := req.Before != 0
	var (
		turns []string
		poss  []uint64
		recs  []turnRecord
	)
	type cand struct {
		turn string
		pos  uint64
	}
	var cands []cand
	flush := func() error {
		names := make([]string, len(cands))
		for i, c := range cands {
			names[i] = c.turn
		}
		got, err := s.summaries(ctx, req.ProjectID, names)
		if err != nil {
			return err
		}
		for i, r := range got {
			if r != nil {
				turns, poss, recs = append(turns, cands[i].turn), append(poss, cands[i].pos), append(recs, *r)
			}
		}
		cands = cands[:0]
		return nil
	}
	for m != nil && len(turns) <= limit {
		var tl turnList
		if err := json.Unmarshal(m.data, &tl); err != nil {
			return nil, fmt.Errorf("jsstore: stored turn list record %d is corrupt: %w", m.seq, err)
		}
		start := len(tl.Turns) - 1
		if first {
			if from >= len(tl.Turns) {
				return nil, cardstore.Invalid("cursor %d names no turn of this list (pass the Next of a page of the same project and agent filter)", req.Before)
			}
			start, first = from-1, false
		}
		for i := start; i >= 0; i-- {
			cands = append(cands, cand{tl.Turns[i], pos(m.seq, i)})
			if len(turns)+len(cands) > limit {
				if err := flush(); err != nil {
					return nil, err
				}
				if len(turns) > limit {
					break
				}
			}
		}
		if tl.Prev == 0 || len(turns) > limit {
			break
		}
		if m, err = s.readSeq(ctx, tl.Prev); err != nil {
			return nil, err
		}
		if m == nil {
			return nil, fmt.Errorf("jsstore: turn list %s names record %d, which is missing", subject, tl.Prev)
		}
	}
	if len(cands) > 0 && len(turns) <= limit {
		if err := flush(); err != nil {
			return nil, err
		}
	}
	res := &cardstore.ListTurnsResult{Turns: []cardstore.TurnInfo{}}
	if len(turns) > limit {
		turns, poss, recs = turns[:limit], poss[:limit], recs[:limit]
		res.Next = poss[limit-1]
	}
	for i, r := range recs {
		res.Turns = append(res.Turns, r.Info(turns[i]))
	}
	return res, nil
}

// summaries reads the summaries of turns: in one request on a single
// replica, from the leader one by one on a replicated stream (summaries
// change, and a lagging replica would show an old count). A turn without
// a summary (removed by DeleteTurn) has nil.
func (s *Store) summaries(ctx context.Context, project string, turns []string) ([]*turnRecord, error) {
	subjects := make([]string, len(turns))
	for i, t := range turns {
		subjects[i] = s.lay.summary(project, t)
	}
	var stored []*msg
	if s.leaderReads {
		stored = make([]*msg, len(turns))
		for i, sub := range subjects {
			m, err := s.readLast(ctx, sub, true)
			if err != nil {
				return nil, err
			}
			stored[i] = m
		}
	} else {
		var err error
		if stored, err = s.lastMany(ctx, subjects, true); err != nil {
			return nil, err
		}
	}
	out := make([]*turnRecord, len(turns))
	for i, m := range stored {
		if m == nil {
			continue // deleted (DeleteTurn)
		}
		out[i] = new(turnRecord)
		if err := json.Unmarshal(m.data, out[i]); err != nil {
			return nil, fmt.Errorf("jsstore: stored summary of turn %q in project %s is corrupt: %w", turns[i], project, err)
		}
	}
	return out, nil
}
