package jsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
)

// Group commit. An atomic batch costs the server far more than its
// messages (on a single-replica file stream it stages the batch in a store
// of its own and fsyncs it before the commit), so the Puts of one Store
// share batches: a Put that finds the store idle commits at once, in its
// own goroutine; Puts that arrive while a batch is in flight queue, and
// when it ends one goroutine commits everything queued (up to groupBudget
// messages) as one batch, and repeats until the queue is empty.
//
// Puts that share a batch stay independent: the planner checks each one
// against the stored records and the Puts before it in the queue, so a Put
// that fails (ErrConflict, ErrResultExists) is left out and the others go
// ahead. When the batch itself fails with a compare-and-set (a writer in
// another process got in between), the whole group is planned again; when
// it fails otherwise, each Put is retried alone, so that one Put's error
// is never another's.

// groupBudget bounds the messages of one group's batch: below nats-server's
// default max_batch_size (1000), so that grouping never makes a batch too
// large that would fit alone.
const groupBudget = 900

// groupBytes bounds the card bytes of one group's batch, as boltstore
// bounds a commit: a group of big Puts is split, a single Put is never.
const groupBytes = 16 << 20

// putReq is one Put waiting for its group.
type putReq struct {
	ctx   context.Context
	pcs   []putCard
	fence *fence // PutToolResult's claim, nil for Put
	size  int    // estimated messages
	bytes int    // card bytes
	done  chan error
}

// fence is the claim a PutToolResult writes its results under: the
// planner checks each new result's call claim against it and guards the
// claim's tombstone by the sequence of the record it checked, so the
// check and the write are one batch (see checkFence).
type fence struct {
	tool, holder string
	token        uint64
}

// committer is the queue of Puts.
type committer struct {
	mu    sync.Mutex
	busy  bool
	queue []*putReq
}

// estimate is an upper bound of the messages a Put writes.
func estimate(pcs []putCard) int {
	n := 1 // turn list
	for i := range pcs {
		n += 2 // card, index or summary share
		if pcs[i].Turn != "" {
			n += 2 // summary, agent list
		}
		if pcs[i].Call != "" {
			n += 2 // result, claim tombstone
		}
	}
	return n
}

// cardBytes adds up the encoded sizes of the cards.
func cardBytes(pcs []putCard) int {
	n := 0
	for i := range pcs {
		n += len(pcs[i].Data)
	}
	return n
}

// commit runs a Put (a PutToolResult when f is not nil) through the group
// committer and returns its outcome.
func (s *Store) commit(ctx context.Context, pcs []putCard, f *fence) error {
	r := &putReq{ctx: ctx, pcs: pcs, fence: f, size: estimate(pcs), bytes: cardBytes(pcs), done: make(chan error, 1)}
	s.cm.mu.Lock()
	if s.cm.busy {
		s.cm.queue = append(s.cm.queue, r)
		s.cm.mu.Unlock()
		return <-r.done
	}
	s.cm.busy = true
	s.cm.mu.Unlock()
	s.commitGroup([]*putReq{r})
	if s.next() {
		go s.drain()
	}
	return <-r.done
}

// next reports whether requests are queued; when none are, it marks the
// committer idle.
func (s *Store) next() bool {
	s.cm.mu.Lock()
	defer s.cm.mu.Unlock()
	if len(s.cm.queue) == 0 {
		s.cm.busy = false
		return false
	}
	return true
}

// drain commits queued groups until the queue is empty.
func (s *Store) drain() {
	for {
		s.cm.mu.Lock()
		var group []*putReq
		size, bytes := 0, 0
		for len(s.cm.queue) > 0 {
			r := s.cm.queue[0]
			if len(group) > 0 && (size+r.size > groupBudget || bytes+r.bytes > groupBytes) {
				break
			}
			group = append(group, r)
			size, bytes = size+r.size, bytes+r.bytes
			s.cm.queue = s.cm.queue[1:]
		}
		s.cm.mu.Unlock()
		s.commitGroup(group)
		if !s.next() {
			return
		}
	}
}

// commitGroup writes the Puts of group in one batch and answers each.
func (s *Store) commitGroup(group []*putReq) {
	live := group[:0:0]
	for _, r := range group {
		if err := r.ctx.Err(); err != nil {
			r.done <- err // ended while queued: skipped
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	// The batch belongs to the whole group, so no one caller's context
	// may cancel it: bound it by the request timeout, or by the latest
	// deadline of the group's callers when every one has an earlier one.
	deadline := time.Now().Add(s.cfg.RequestTimeout)
	var latest time.Time
	all := true
	for _, r := range live {
		d, ok := r.ctx.Deadline()
		if !ok {
			all = false
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	if all && latest.Before(deadline) {
		deadline = latest
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for attempt := 0; ; attempt++ {
		p, err := s.plan(ctx, live, attempt > 0)
		if err != nil {
			for _, r := range live {
				r.done <- err
			}
			return
		}
		if s.beforeWrite != nil {
			s.beforeWrite()
		}
		if _, err = s.publish(ctx, p.msgs); err == nil {
			for i, r := range live {
				r.done <- p.outcome[i]
			}
			return
		}
		switch {
		case errors.Is(err, errUnknownOutcome):
			// Read back what the unanswered batch did (resend.go).
			s.settleUnknown(live, p, err)
			return
		case errors.Is(err, errCAS):
			if err := backoff(ctx, attempt); err != nil {
				for _, r := range live {
					r.done <- fmt.Errorf("%w (after %d attempts lost to writers in other processes)", err, attempt+1)
				}
				return
			}
		case count(p.included) > 1:
			// Retry each Put alone, so that its error is its own.
			for i, r := range live {
				if p.outcome[i] != nil || !p.included[i] {
					r.done <- p.outcome[i]
					continue
				}
				s.commitGroup([]*putReq{r})
			}
			return
		default:
			for _, r := range live {
				r.done <- err
			}
			return
		}
	}
}

// count counts the true values.
func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// plan is the batch of a group and the outcome of each of its Puts.
type plan struct {
	msgs     []*nats.Msg
	outcome  []error
	included []bool // the Put wrote something
}

// turnUpdate is the change of one turn's summary within a group.
type turnUpdate struct {
	project, turn string
	rec           turnRecord
	seq           uint64 // of the summary read; 0 for a new turn
	newTurn       bool
	touched       bool
}

// plan reads what the group depends on and checks every Put against it
// and against the Puts before it, in queue order.
//
// The turn summaries and list heads of a first attempt are read
// optimistically, in one direct get that any replica may answer: a
// lagging replica's older record only makes the batch's compare-and-set
// fail, and the next attempt (leader, true) reads them from the leader.
// Claims are always read from the leader, since a PutToolResult's fence
// check refuses on what it reads.
func (s *Store) plan(ctx context.Context, group []*putReq, leader bool) (*plan, error) {
	p := &plan{outcome: make([]error, len(group)), included: make([]bool, len(group))}
	// Read every card and result the group names.
	var cardSubj, resSubj []string
	seen := make(map[string]bool)
	for _, r := range group {
		for i := range r.pcs {
			pc := &r.pcs[i]
			if sub := s.lay.card(pc.ProjectID, pc.ID); !seen[sub] {
				seen[sub] = true
				cardSubj = append(cardSubj, sub)
			}
			if pc.Call != "" {
				if sub := s.lay.result(pc.ProjectID, pc.Turn, pc.Call); !seen[sub] {
					seen[sub] = true
					resSubj = append(resSubj, sub)
				}
			}
		}
	}
	// The mutable records the plan may read: each result's call claim,
	// each turn's summary.
	var sumSubj, claimSubj []string
	for _, r := range group {
		for i := range r.pcs {
			pc := &r.pcs[i]
			if pc.Dup {
				continue
			}
			if pc.Turn != "" {
				if sub := s.lay.summary(pc.ProjectID, pc.Turn); !seen[sub] {
					seen[sub] = true
					sumSubj = append(sumSubj, sub)
				}
			}
			if pc.Call != "" {
				if sub := s.lay.claim(pc.ProjectID, pc.Key().String()); !seen[sub] {
					seen[sub] = true
					claimSubj = append(claimSubj, sub)
				}
			}
		}
	}
	cards, pre, err := s.planReads(ctx, append(cardSubj, resSubj...), claimSubj, sumSubj, leader)
	if err != nil {
		return nil, err
	}
	results := cards
	turns := make(map[string]*turnUpdate) // by summary subject
	var turnOrder []*turnUpdate
	claims := make(map[string]bool) // claim subjects to end
	var claimOrder []string
	read := make(map[string]claimRead) // claim records read, by subject
	var newTurns []string
	newTurnsOf := make(map[string][]string) // project -> turns
	var agents []string
	agentTurns := make(map[string][]string) // agent list subject -> turns
	for ri, r := range group {
		// Check first: a Put that fails leaves no trace in the plan. A
		// PutToolResult's claims are checked before its cards, as in
		// boltstore.
		if r.fence != nil {
			if p.outcome[ri] = s.checkFence(ctx, pre, r, results, claims, read); p.outcome[ri] != nil {
				continue
			}
		}
		var add []*putCard
		for i := range r.pcs {
			pc := &r.pcs[i]
			if pc.Dup {
				continue
			}
			old, ok := cards[s.lay.card(pc.ProjectID, pc.ID)]
			if ok {
				if string(old) != string(pc.Data) {
					p.outcome[ri] = fmt.Errorf("%w: card %s already exists in project %s with other bytes (cards are immutable)", cardstore.ErrConflict, pc.ID, pc.ProjectID)
					break
				}
				continue // identical repeat: nothing to write
			}
			if pc.Call != "" {
				if old, ok := results[s.lay.result(pc.ProjectID, pc.Turn, pc.Call)]; ok {
					p.outcome[ri] = fmt.Errorf("%w: agent_turn_id %q, tool_call_id %q in project %s already has result card %s; card %s refused",
						cardstore.ErrResultExists, pc.Turn, pc.Call, pc.ProjectID, old, pc.ID)
					break
				}
			}
			add = append(add, pc)
		}
		if p.outcome[ri] != nil || len(add) == 0 {
			continue
		}
		p.included[ri] = true
		// Then write: cards, the Put's turn index records, results.
		var idxOrder []string
		idx := make(map[string][]string)
		for _, pc := range add {
			sub := s.lay.card(pc.ProjectID, pc.ID)
			cards[sub] = pc.Data
			p.msgs = append(p.msgs, expect(record(sub, pc.Data), 0))
			if pc.Turn == "" {
				continue
			}
			ts := s.lay.turn(pc.ProjectID, pc.Turn)
			if idx[ts] == nil {
				idxOrder = append(idxOrder, ts)
			}
			idx[ts] = append(idx[ts], pc.ID)
			sum := s.lay.summary(pc.ProjectID, pc.Turn)
			tu := turns[sum]
			if tu == nil {
				tu = &turnUpdate{project: pc.ProjectID, turn: pc.Turn}
				if err := s.loadSummary(ctx, pre, sum, tu); err != nil {
					return nil, err
				}
				turns[sum] = tu
				turnOrder = append(turnOrder, tu)
				if tu.newTurn {
					if newTurnsOf[pc.ProjectID] == nil {
						newTurns = append(newTurns, pc.ProjectID)
					}
					newTurnsOf[pc.ProjectID] = append(newTurnsOf[pc.ProjectID], pc.Turn)
				}
			}
			tu.touched = true
			if tu.rec.Add(pc.Type, pc.AgentID, pc.CreatedAt, len(pc.Data)) {
				al := s.lay.agentList(pc.ProjectID, pc.AgentID)
				if agentTurns[al] == nil {
					agents = append(agents, al)
				}
				agentTurns[al] = append(agentTurns[al], pc.Turn)
			}
		}
		for _, ts := range idxOrder {
			data, err := json.Marshal(turnIndex{IDs: idx[ts]})
			if err != nil {
				return nil, fmt.Errorf("jsstore: encode turn index: %w", err)
			}
			p.msgs = append(p.msgs, record(ts, data))
		}
		for _, pc := range add {
			if pc.Call == "" {
				continue
			}
			sub := s.lay.result(pc.ProjectID, pc.Turn, pc.Call)
			results[sub] = []byte(pc.ID)
			p.msgs = append(p.msgs, expect(record(sub, []byte(pc.ID)), 0))
			// The result ends its call's claim, whoever holds it (once:
			// the group may hold the call's result twice, identical).
			if cs := s.lay.claim(pc.ProjectID, pc.Key().String()); !claims[cs] {
				claims[cs] = true
				claimOrder = append(claimOrder, cs)
			}
		}
	}
	// Group-level records: claim tombstones, summaries, turn lists.
	for _, cs := range claimOrder {
		// A claim a PutToolResult checked is guarded by the very record
		// it checked: a take-over since makes the batch fail, and the
		// plan again refuses that Put with ErrClaimLost.
		cr, ok := read[cs]
		if !ok {
			var err error
			if cr.m, cr.rec, err = s.loadClaimFrom(ctx, pre, cs, "(a result's call)", "(its tool call key)"); err != nil {
				return nil, err
			}
		}
		m, rec := cr.m, cr.rec
		// A tombstone is written even when the key has no claim (or one
		// already), guarded by what was read: a claim taken after this
		// read (StartCall's, Claim's) makes the batch fail and the Put
		// plan again, so that it ends that claim too; without the guard
		// the claim would outlive the result, and its holder run the call
		// again.
		var seq, token uint64
		if m != nil {
			seq, token = m.seq, rec.Token
		}
		data, err := json.Marshal(tombstone(token))
		if err != nil {
			return nil, fmt.Errorf("jsstore: encode claim tombstone: %w", err)
		}
		p.msgs = append(p.msgs, rollup(expect(record(cs, data), seq)))
	}
	for _, tu := range turnOrder {
		data, err := json.Marshal(&tu.rec)
		if err != nil {
			return nil, fmt.Errorf("jsstore: encode turn summary: %w", err)
		}
		p.msgs = append(p.msgs, rollup(expect(record(s.lay.summary(tu.project, tu.turn), data), tu.seq)))
	}
	// The list heads the new turns extend, all at once.
	var heads []string
	for _, project := range newTurns {
		heads = append(heads, s.lay.turnList(project))
	}
	heads = append(heads, agents...)
	if err := s.prefetchGuarded(ctx, pre, heads, leader); err != nil {
		return nil, err
	}
	for _, project := range newTurns {
		m, err := s.listRecord(ctx, pre, s.lay.turnList(project), newTurnsOf[project])
		if err != nil {
			return nil, err
		}
		p.msgs = append(p.msgs, m)
	}
	for _, al := range agents {
		m, err := s.listRecord(ctx, pre, al, agentTurns[al])
		if err != nil {
			return nil, err
		}
		p.msgs = append(p.msgs, m)
	}
	return p, nil
}

// planReads reads everything a plan depends on, at once: the cards and
// results (fixed, the subjects of both kinds in one map: they never
// coincide), from any replica; the claims from the leader; the summaries
// in the same direct get as the cards on a first attempt, from the
// leader with the claims on a later one (leader). A record a lagging
// replica does not show yet is no risk: the batch expects each card and
// result absent and each summary unchanged since the read, so the server
// refuses the batch and the group is planned again, from the leader.
func (s *Store) planReads(ctx context.Context, fixed, claimSubj, sumSubj []string, leader bool) (map[string][]byte, prefetch, error) {
	direct, fromLeader := fixed, claimSubj
	if leader {
		fromLeader = append(slices.Clip(claimSubj), sumSubj...)
	} else {
		direct = append(slices.Clip(fixed), sumSubj...)
	}
	var (
		got        []*msg
		pre        prefetch
		derr, lerr error
		wg         sync.WaitGroup
	)
	wg.Go(func() { pre, lerr = s.prefetch(ctx, fromLeader) })
	if len(direct) > 0 {
		got, derr = s.lastMany(ctx, direct, false)
	}
	wg.Wait()
	if err := errors.Join(derr, lerr); err != nil {
		return nil, nil, err
	}
	cards := make(map[string][]byte, len(fixed))
	for i, sub := range fixed {
		if m := got[i]; m != nil {
			cards[sub] = m.data
		}
	}
	for i, sub := range direct[len(fixed):] {
		pre[sub] = got[len(fixed)+i]
	}
	return cards, pre, nil
}

// readMap reads the last message of each subject (immutable records) and
// returns the data of those that have one.
func (s *Store) readMap(ctx context.Context, subjects []string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(subjects))
	if len(subjects) == 0 {
		return out, nil
	}
	stored, err := s.lastMany(ctx, subjects, false)
	if err != nil {
		return nil, err
	}
	for i, m := range stored {
		if m != nil {
			out[subjects[i]] = m.data
		}
	}
	return out, nil
}

// loadSummary reads a turn's summary into tu.
func (s *Store) loadSummary(ctx context.Context, pre prefetch, subject string, tu *turnUpdate) error {
	m, err := s.lastOf(ctx, pre, subject)
	if err != nil {
		return err
	}
	if m == nil {
		tu.newTurn = true
		return nil
	}
	tu.seq = m.seq
	if err := json.Unmarshal(m.data, &tu.rec); err != nil {
		return fmt.Errorf("jsstore: stored summary of turn %q in project %s is corrupt: %w", tu.turn, tu.project, err)
	}
	return nil
}

// claimRead is a claim record as the planner read it (both nil: never
// claimed).
type claimRead struct {
	m   *msg
	rec *claimRecord
}

// checkFence applies PutToolResult's claim rules (boltstore's) to the
// new results of r: unless the call already has a result (then Put's
// rules decide: an identical card is a no-op, another one
// ErrResultExists), its claim must be held by the fence's holder with its
// token and have been taken for its tool. The records it reads go to
// read, so that plan guards each result's claim tombstone by the record
// checked here; ended holds the claims an earlier Put of the group ends.
func (s *Store) checkFence(ctx context.Context, pre prefetch, r *putReq, results map[string][]byte, ended map[string]bool, read map[string]claimRead) error {
	f := r.fence
	for i := range r.pcs {
		pc := &r.pcs[i]
		if pc.Call == "" || pc.Dup {
			continue
		}
		if _, ok := results[s.lay.result(pc.ProjectID, pc.Turn, pc.Call)]; ok {
			continue // answered already: Put's rules decide
		}
		key := pc.Key().String()
		cs := s.lay.claim(pc.ProjectID, key)
		cr, ok := read[cs]
		if !ok {
			var err error
			if cr.m, cr.rec, err = s.loadClaimFrom(ctx, pre, cs, pc.ProjectID, key); err != nil {
				return err
			}
			read[cs] = cr
		}
		rec := cr.rec.base()
		if ended[cs] {
			rec = nil // an earlier Put of the group ends it
		}
		if err := cardstore.CheckResultFence(rec, pc.ProjectID, pc.Key(), f.tool, f.holder, f.token); err != nil {
			return err
		}
	}
	return nil
}
