package kvinbox

import (
	"context"
	"fmt"

	"github.com/utpmesh/utpmesh/pkg/inbox"
)

// DeleteTurn removes the turn's entries: it reads them all through the
// turn index (u.) and refuses with inbox.ErrPending if one is pending,
// then deletes each entry's index keys, the entry, its dedupe key, and
// the turn's index keys and epoch last. The bucket has no transaction:
// a DeleteTurn cut short is finished by the next one (an index key whose
// entry is gone is removed). Retention deletes only turns idle for
// longer than its limit, so no report races the delete.
func (b *KV) DeleteTurn(ctx context.Context, project, turn string) (int, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	turnTok := hashToken(project, turn)
	uPrefix := "u." + project + "." + turnTok + "."
	ids, err := b.keys(ctx, uPrefix)
	if err != nil {
		return 0, err
	}
	var recs []*record
	for _, id := range ids {
		r, _, err := b.getRecord(ctx, project, id)
		if err != nil {
			return 0, err
		}
		if r == nil {
			continue // deleted by a DeleteTurn cut short
		}
		if r.State == inbox.StatePending {
			return 0, fmt.Errorf("%w: entry %s (tool_call_id %q) of turn %q in project %s is pending: its agent has not consumed the result",
				inbox.ErrPending, r.InboxID, r.ToolCallID, turn, project)
		}
		recs = append(recs, r)
	}
	del := func(k string) error {
		if err := b.bk.Drop(ctx, k); err != nil {
			return fmt.Errorf("kvinbox: delete turn %q of project %s: %s: %w", turn, project, k, err)
		}
		return nil
	}
	for _, r := range recs {
		for _, k := range []string{agentKey(r), entryKey(project, r.InboxID),
			"c." + project + "." + hashToken(project, r.AgentTurnID, r.ToolCallID)} {
			if err := del(k); err != nil {
				return 0, err
			}
		}
	}
	for _, id := range ids {
		if err := del(uPrefix + id); err != nil {
			return 0, err
		}
	}
	if err := del("t." + project + "." + turnTok); err != nil {
		return 0, err
	}
	return len(recs), nil
}
