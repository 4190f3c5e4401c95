package kvinbox

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/utpmesh/utpmesh/internal/parallel"

	"github.com/utpmesh/utpmesh/pkg/inbox"
)

// readParallel is how many entry reads one List keeps in flight.
const readParallel = 32

// List reads what the page needs, without a consumer, in time that
// follows the page (and, for pending entries, the agent's pending
// entries), not the agent's history:
//
//   - one turn (AgentTurnID): the turn's index keys (u.) from one stream
//     info request, in inbox id order;
//   - pending entries: the agent's pending keys (p.) from one stream info
//     request, in inbox id order;
//   - acked, stale or all entries: a walk of the agent's index keys (a.)
//     in the order they were written, one leader read per key from the
//     cursor's key on (jskv.Bucket.Next), until the page is full.
//
// Inbox ids are UUIDv7s and an insert writes the entry's index keys once
// (index), so both orders are creation order; they differ only for
// entries two inserts made at the same moment. The page's entries are
// read from the leader, up to readParallel at a time.
func (b *KV) List(ctx context.Context, project string, q inbox.ListQuery) ([]inbox.Entry, error) {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	if q.After != "" {
		after, _, err := b.getRecord(ctx, project, q.After)
		if err != nil {
			return nil, err
		}
		if after == nil || after.AgentID != q.AgentID {
			return nil, fmt.Errorf("%w: after: inbox entry %s of agent %s in project %s", inbox.ErrNotFound, q.After, q.AgentID, project)
		}
	}
	keep := func(r *record) bool {
		return r.AgentID == q.AgentID && (q.AgentTurnID == "" || r.AgentTurnID == q.AgentTurnID) &&
			(q.ToolCallID == "" || r.ToolCallID == q.ToolCallID) && (q.State == inbox.StateAll || r.State == q.State)
	}
	switch {
	case q.ToolCallID != "":
		return b.listCall(ctx, project, q, keep)
	case q.AgentTurnID != "":
		return b.listKeys(ctx, project, "u."+project+"."+hashToken(project, q.AgentTurnID)+".", q, keep)
	case q.State == inbox.StatePending:
		return b.listKeys(ctx, project, "p."+project+"."+q.AgentID+".", q, keep)
	default:
		return b.walk(ctx, project, q, keep)
	}
}

// listCall lists the entry of one call (q.ToolCallID): its dedupe key
// names it. A key whose entry is not written yet (an insert under way) is
// no entry yet, as in the turn's listing.
func (b *KV) listCall(ctx context.Context, project string, q inbox.ListQuery, keep func(*record) bool) ([]inbox.Entry, error) {
	out := []inbox.Entry{}
	e, err := b.bk.Latest(ctx, "c."+project+"."+hashToken(project, q.AgentTurnID, q.ToolCallID))
	if err != nil {
		return nil, fmt.Errorf("kvinbox: read the dedupe key of call %s: %w", q.ToolCallID, err)
	}
	if !e.Exists {
		return out, nil
	}
	id := string(e.Value)
	if q.After != "" && id <= q.After {
		return out, nil
	}
	r, _, err := b.getRecord(ctx, project, id)
	if err != nil {
		return nil, err
	}
	if r != nil && q.Limit > 0 && keep(r) {
		out = append(out, r.Entry)
	}
	return out, nil
}

// listKeys lists the entries named by the keys under prefix (their last
// token is the inbox id), in inbox id order from q.After on. A pending
// key whose entry is not pending any more (a delete marker an older
// version left, or an ack racing the read) is dropped on the way.
func (b *KV) listKeys(ctx context.Context, project, prefix string, q inbox.ListQuery, keep func(*record) bool) ([]inbox.Entry, error) {
	ids, err := b.keys(ctx, prefix)
	if err != nil {
		return nil, err
	}
	sort.Strings(ids)
	if q.After != "" {
		ids = ids[sort.Search(len(ids), func(i int) bool { return ids[i] > q.After }):]
	}
	out := []inbox.Entry{}
	for len(ids) > 0 && len(out) < q.Limit {
		n := min(len(ids), q.Limit-len(out))
		recs, err := b.readRecords(ctx, project, ids[:n])
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if r == nil {
				continue // removed by a DeleteTurn cut short
			}
			if strings.HasPrefix(prefix, "p.") && r.State != inbox.StatePending {
				if err := b.bk.Drop(ctx, pendingKey(r)); err != nil {
					return nil, fmt.Errorf("kvinbox: pending index of %s: %w", r.InboxID, err)
				}
			}
			if keep(r) {
				out = append(out, r.Entry)
			}
		}
		ids = ids[n:]
	}
	return out, nil
}

// walk lists the agent's entries in the order their agent keys were
// written: it starts after the cursor's agent key (or at the agent's
// floor, see KV.floors), walks as many keys as the page still needs, reads
// their entries, and goes on until the page is full or the keys end.
func (b *KV) walk(ctx context.Context, project string, q inbox.ListQuery, keep func(*record) bool) ([]inbox.Entry, error) {
	pre := "a." + project + "." + q.AgentID + "."
	floorKey := project + "." + q.AgentID
	var from uint64
	if q.After != "" {
		e, err := b.bk.Latest(ctx, pre+q.After)
		if err != nil {
			return nil, fmt.Errorf("kvinbox: read %s%s: %w", pre, q.After, err)
		}
		if !e.Exists {
			return nil, fmt.Errorf("%w: after: inbox entry %s of agent %s in project %s has no agent index key (an insert still under way)", inbox.ErrNotFound, q.After, q.AgentID, project)
		}
		from = e.Revision + 1
	} else {
		b.floorMu.Lock()
		from = b.floors[floorKey]
		b.floorMu.Unlock()
	}
	out := []inbox.Entry{}
	first := q.After == ""
	for end := false; !end && len(out) < q.Limit; {
		var ids []string
		for len(ids) < q.Limit-len(out) {
			key, e, found, err := b.bk.Next(ctx, pre+"*", from)
			if err != nil {
				return nil, fmt.Errorf("kvinbox: list %s*: %w", pre, err)
			}
			if !found {
				end = true
				break
			}
			if first {
				// No agent key of this agent lies below the first one found:
				// later keys get later sequences.
				b.floorMu.Lock()
				b.floors[floorKey] = max(b.floors[floorKey], e.Revision)
				b.floorMu.Unlock()
				first = false
			}
			from = e.Revision + 1
			if e.Exists {
				ids = append(ids, strings.TrimPrefix(key, pre))
			}
		}
		recs, err := b.readRecords(ctx, project, ids)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if r != nil && keep(r) {
				out = append(out, r.Entry)
			}
		}
	}
	return out, nil
}

// readRecords reads the entries of ids from the leader, up to
// readParallel at a time; an entry that does not exist is nil.
func (b *KV) readRecords(ctx context.Context, project string, ids []string) ([]*record, error) {
	recs := make([]*record, len(ids))
	err := parallel.Each(len(ids), readParallel, func(i int) (err error) {
		recs[i], _, err = b.getRecord(ctx, project, ids[i])
		return err
	})
	if err != nil {
		return nil, err
	}
	return recs, nil
}
