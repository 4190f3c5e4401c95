package kvinbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/pkg/inbox"
)

// Check reads the whole bucket from the stream leader and reports the
// first disagreement between the entries and their keys: an entry stored
// under another key, a dedupe, agent, pending or turn key naming a missing
// entry, a pending key of an entry that is not pending, a pending entry
// without its pending key. Run it while no insert is in flight (a half
// insert, repaired by the report's redelivery, is reported). Tests end
// with it.
func (b *KV) Check(ctx context.Context) error {
	ctx, cancel := b.ctx(ctx)
	defer cancel()
	live := map[string][]byte{}
	err := b.bk.Scan(ctx, ">", func(k string, e jskv.Entry) error {
		if e.Exists {
			live[k] = e.Value
		} else {
			delete(live, k)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("kvinbox: check: %w", err)
	}
	recs := map[string]*record{} // by "<project>.<inbox_id>"
	for k, v := range live {
		if !strings.HasPrefix(k, "e.") {
			continue
		}
		var r record
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("kvinbox: check: %s is not JSON: %w", k, err)
		}
		if k != entryKey(r.ProjectID, r.InboxID) {
			return fmt.Errorf("kvinbox: check: entry %s of project %s is stored under %s", r.InboxID, r.ProjectID, k)
		}
		recs[r.ProjectID+"."+r.InboxID] = &r
	}
	for k, v := range live {
		var owner string // "<project>.<inbox_id>" the key names
		parts := strings.Split(k, ".")
		switch parts[0] {
		case "c":
			owner = parts[1] + "." + string(v)
		case "a", "p", "u":
			owner = parts[1] + "." + parts[len(parts)-1]
		default:
			continue
		}
		r, ok := recs[owner]
		if !ok {
			return fmt.Errorf("kvinbox: check: %s names missing entry %s", k, owner)
		}
		if parts[0] == "p" && r.State != inbox.StatePending {
			return fmt.Errorf("kvinbox: check: pending key %s names an entry in state %s", k, r.State)
		}
	}
	for _, r := range recs {
		if _, ok := live[pendingKey(r)]; r.State == inbox.StatePending && !ok {
			return fmt.Errorf("kvinbox: check: pending entry %s of project %s has no pending key", r.InboxID, r.ProjectID)
		}
		if _, ok := live[agentKey(r)]; !ok {
			return fmt.Errorf("kvinbox: check: entry %s of project %s has no agent key", r.InboxID, r.ProjectID)
		}
	}
	return nil
}
