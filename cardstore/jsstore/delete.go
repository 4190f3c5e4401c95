package jsstore

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
)

// DeleteTurn removes the turn's records from the stream by purging their
// subjects; see cardstore.Store. A stream has no transaction that spans
// subjects, so the purges are ordered to be safe to repeat: the claims of
// the turn's calls are checked first (a live one fails with ErrClaimHeld
// and removes nothing); then the summary goes (ListTurns stops listing
// the turn), then the cards, the result index, the claim tombstones, and
// the turn index last, so a DeleteTurn cut short by a crash is finished
// by the next one, which still finds the turn's card ids. The turn list
// records (l, a) keep naming the turn; ListTurns skips turns without a
// summary. Retention deletes only turns idle for longer than its limit:
// a Put into the turn while it is being deleted may leave that card
// unindexed.
func (s *Store) DeleteTurn(ctx context.Context, projectID, agentTurnID string) (int, error) {
	if err := checkCtx(ctx); err != nil {
		return 0, err
	}
	if err := cardstore.CheckTurn(projectID, agentTurnID); err != nil {
		return 0, err
	}
	leave, err := s.enter()
	if err != nil {
		return 0, err
	}
	defer leave()
	ctx, cancel := s.reqCtx(ctx)
	defer cancel()

	cards, err := cardstore.AllTurn(ctx, s, projectID, agentTurnID)
	if err != nil {
		return 0, err
	}
	calls := map[string]bool{}
	for _, c := range cards {
		if c.ToolCallID != "" {
			calls[c.ToolCallID] = true
		}
	}
	var claimSubjects []string
	for call := range calls {
		key := cardstore.CallKey{AgentTurnID: agentTurnID, ToolCallID: call}.String()
		subj := s.lay.claim(projectID, key)
		_, rec, err := s.loadClaim(ctx, subj, projectID, key)
		if err != nil {
			return 0, err
		}
		if rec == nil {
			continue
		}
		if rec.Live() {
			return 0, fmt.Errorf("%w: turn %q of project %s has a call with a live claim (%s, held by %s): it is running or was abandoned without a result, so the turn is kept",
				cardstore.ErrClaimHeld, agentTurnID, projectID, key, rec.Holder)
		}
		claimSubjects = append(claimSubjects, subj)
	}
	st, err := s.js.Stream(ctx, s.cfg.Stream)
	if err != nil {
		return 0, fmt.Errorf("jsstore: delete turn %q of project %s: stream %s: %w", agentTurnID, projectID, s.cfg.Stream, err)
	}
	subjects := []string{s.lay.summary(projectID, agentTurnID)}
	for _, c := range cards {
		subjects = append(subjects, s.lay.card(projectID, c.CardID))
	}
	subjects = append(subjects, s.lay.subj(kindResult, projectID, tok(agentTurnID), "*"))
	subjects = append(subjects, claimSubjects...)
	subjects = append(subjects, s.lay.turn(projectID, agentTurnID))
	for _, subj := range subjects {
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return 0, fmt.Errorf("jsstore: delete turn %q of project %s: purge %s: %w", agentTurnID, projectID, subj, err)
		}
	}
	return len(cards), nil
}
