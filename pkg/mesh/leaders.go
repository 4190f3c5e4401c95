package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/pkg/streams"
)

// DefaultLeaderCheck is Config.LeaderCheck's default.
const DefaultLeaderCheck = 2 * time.Second

// leaderRequest bounds one JetStream API request of the leader keeper.
const leaderRequest = 5 * time.Second

// Why leaders are kept together: every stream, key-value bucket and
// consumer of the mesh is a RAFT group of its own with its own leader,
// and nats-server spreads those leaders over the nodes. A call needs
// several of them (the CardStore's stream, the command stream and its
// tool consumer, the inbox bucket, the wakeup stream), so the loss of any
// node used to stall calls for a RAFT election (4–9 s in nats-server,
// not configurable) of whatever it led. The keeper gathers every leader on
// the node that leads the command stream: a node that leads nothing then
// costs only the requests it was serving when it died, and the loss of the
// leading node costs one round of elections, held in parallel.

// keepLeaders runs, on a cluster node, until ctx ends: every interval,
// while this node leads the command stream, it asks the leader of every
// other stream and consumer it is a current replica of to step down in
// its favour.
func (m *Mesh) keepLeaders(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := m.gatherLeaders(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Logger.Debug("mesh: gathering JetStream leaders", "err", err)
		} else if n > 0 {
			m.cfg.Logger.Debug("mesh: moved JetStream leaders to this node", "moved", n)
		}
	}
}

// gatherLeaders asks, once, for the leaders of every stream and consumer
// this node is a current replica of to move here when this node leads the
// command stream; it returns how many it asked to move.
func (m *Mesh) gatherLeaders(ctx context.Context) (int, error) {
	js, err := jetstream.New(m.nc)
	if err != nil {
		return 0, err
	}
	me := m.srv.NATS().Name()
	ctx, cancel := context.WithTimeout(ctx, 4*leaderRequest)
	defer cancel()
	cmd, err := js.Stream(ctx, streams.CommandStream(m.cfg.ProtocolVersion))
	if err != nil {
		return 0, err
	}
	if ci := cmd.CachedInfo().Cluster; ci == nil || ci.Leader != me {
		return 0, nil
	}
	moved := 0
	var errs []error
	sl := js.ListStreams(ctx)
	for si := range sl.Info() {
		if follows(si.Cluster, me) {
			if err := m.stepDown(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+si.Config.Name, me); err != nil {
				errs = append(errs, fmt.Errorf("stream %s: %w", si.Config.Name, err))
			} else {
				moved++
			}
		}
		st, err := js.Stream(ctx, si.Config.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cl := st.ListConsumers(ctx)
		for ci := range cl.Info() {
			if !follows(ci.Cluster, me) {
				continue
			}
			if err := m.stepDown(ctx, "$JS.API.CONSUMER.LEADER.STEPDOWN."+si.Config.Name+"."+ci.Name, me); err != nil {
				errs = append(errs, fmt.Errorf("consumer %s/%s: %w", si.Config.Name, ci.Name, err))
			} else {
				moved++
			}
		}
		if err := cl.Err(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := sl.Err(); err != nil {
		errs = append(errs, err)
	}
	return moved, errors.Join(errs...)
}

// follows reports whether a replicated asset has a leader other than me
// and me as a current replica.
func follows(ci *jetstream.ClusterInfo, me string) bool {
	if ci == nil || ci.Leader == "" || ci.Leader == me {
		return false
	}
	for _, r := range ci.Replicas {
		if r.Name == me && r.Current && !r.Offline {
			return true
		}
	}
	return false
}

// stepDown asks a stream's or consumer's leader to hand over to server.
func (m *Mesh) stepDown(ctx context.Context, subj, server string) error {
	body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": server}})
	rctx, cancel := deadline.Within(ctx, leaderRequest)
	defer cancel()
	msg, err := deadline.Request(rctx, m.nc, subj, body)
	if err != nil {
		return err
	}
	var resp struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("malformed step-down reply: %w", err)
	}
	if resp.Error != nil {
		return errors.New(resp.Error.Description)
	}
	return nil
}
