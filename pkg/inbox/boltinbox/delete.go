package boltinbox

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/pkg/inbox"
)

// DeleteTurn removes the turn's entries with every index entry naming
// them (calls, agents) and the turn's epoch, in one transaction; a
// pending entry fails it with inbox.ErrPending before anything is
// written. The calls bucket's keys of the turn share the prefix
// project·agent_turn_id, so the turn is one prefix scan.
func (d *DB) DeleteTurn(ctx context.Context, project, turn string) (int, error) {
	n := 0
	err := d.update(ctx, func(tx *bolt.Tx) error {
		n = 0
		turnKey := key(project, turn)
		calls := tx.Bucket(bucketCalls)
		var callKeys [][]byte
		var recs []*record
		c := calls.Cursor()
		for k, v := c.Seek(turnKey); k != nil && bytes.HasPrefix(k, turnKey); k, v = c.Next() {
			r, err := getRecord(tx, project, string(v))
			if err != nil {
				return err
			}
			if r == nil || r.AgentTurnID != turn {
				// A prefix of another turn's key cannot match (length
				// prefixes), so this is a dedupe key without its entry.
				return fmt.Errorf("inbox: dedupe index of turn %q in project %s names entry %s, which does not exist", turn, project, v)
			}
			if r.State == inbox.StatePending {
				return fmt.Errorf("%w: entry %s (tool_call_id %q) of turn %q in project %s is pending: its agent has not consumed the result",
					inbox.ErrPending, r.InboxID, r.ToolCallID, turn, project)
			}
			callKeys = append(callKeys, bytes.Clone(k))
			recs = append(recs, r)
		}
		for i, r := range recs {
			if err := tx.Bucket(bucketEntries).Delete(key(project, r.InboxID)); err != nil {
				return err
			}
			if err := tx.Bucket(bucketAgents).Delete(seqKey(key(project, r.AgentID), r.Seq)); err != nil {
				return err
			}
			if err := calls.Delete(callKeys[i]); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketEpochs).Delete(turnKey); err != nil {
			return err
		}
		n = len(recs)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
