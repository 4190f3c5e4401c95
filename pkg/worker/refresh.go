package worker

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/subjects"
)

// RefreshEndpoint names the svc operation that makes one worker runtime
// reload its configuration: it forgets the registry entries (and compiled
// schemas) it caches, so the next call of each tool reads its entry from
// the registry again. Each runtime listens on
// cg.<ver>.<project>.<channel>.svc.worker.refresh_config_<service id>
// (any project and channel; RefreshOp), where <service id> is the id of
// its utpmesh-worker micro service (what discovery reports), and answers
// with a RefreshReply.
const RefreshEndpoint = "refresh_config"

// RefreshOp is the svc operation of the runtime whose micro service id is
// serviceID.
func RefreshOp(serviceID string) string { return RefreshEndpoint + "_" + serviceID }

// RefreshReply is the reply of a refresh_config request.
type RefreshReply struct {
	Instance string `json:"instance"`
	// Dropped counts the cached registry entries forgotten.
	Dropped int `json:"dropped_entries"`
}

// flush forgets every cached entry and says how many there were.
func (c *entryCache) flush() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.m)
	c.m = nil
	return n
}

// startRefresh subscribes the runtime's refresh_config endpoint for the
// micro service of id serviceID.
func (r *Runtime) startRefresh(ver, serviceID string) (*nats.Subscription, error) {
	subj, err := subjects.ServiceOpPattern(ver, DescribeService, RefreshOp(serviceID))
	if err != nil {
		return nil, fmt.Errorf("worker: refresh endpoint: %w", err)
	}
	sub, err := r.nc.Subscribe(subj, func(m *nats.Msg) {
		n := r.entries.flush()
		r.log.Info("configuration refreshed: cached registry entries dropped", "dropped", n)
		body, _ := json.Marshal(RefreshReply{Instance: r.cfg.InstanceID, Dropped: n})
		_ = m.Respond(body)
	})
	if err != nil {
		return nil, fmt.Errorf("worker: subscribe %s: %w", subj, err)
	}
	return sub, nil
}
