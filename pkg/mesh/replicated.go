package mesh

import (
	"context"

	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore/jsstore"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/jspolicy"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/registry/jsreg"
	"github.com/utpmesh/utpmesh/pkg/streams"
)

// clusterWait bounds how long a cluster node waits for the JetStream
// cluster to form (enough nodes up for a quorum) before giving up.
const clusterWait = 2 * time.Minute

// replicas is the replica count of the replicated state.
func (m *Mesh) replicas() int {
	if r := m.cfg.Replicated.Replicas; r > 0 {
		return r
	}
	if m.cfg.Cluster != nil {
		return 3
	}
	return 1
}

// openReplicated opens the state that lives in JetStream: the streams, the
// CardStore's stream, the registry, policy and inbox buckets, each with
// replicas() copies. In a cluster the first node waits here until enough
// nodes have joined for JetStream to have a leader.
func (m *Mesh) openReplicated(ctx context.Context, js jetstream.JetStream) error {
	cfg, log := m.cfg, m.cfg.Logger
	r := m.replicas()
	wctx, cancel := context.WithTimeout(ctx, clusterWait)
	defer cancel()
	start := time.Now()
	for attempt := 0; ; attempt++ {
		actx, acancel := context.WithTimeout(wctx, 5*time.Second)
		err := streams.Ensure(actx, js, cfg.ProtocolVersion, streams.WithReplicas(r))
		acancel()
		if err == nil {
			break
		}
		if wctx.Err() != nil || ctx.Err() != nil {
			return fmt.Errorf("mesh: the JetStream cluster did not accept %d-replica streams within %v (are %d nodes up and routed to each other?): %w", r, clusterWait, r, err)
		}
		if attempt%3 == 0 {
			log.Info("waiting for the JetStream cluster to form", "replicas", r, "waited", time.Since(start).Round(time.Second), "err", err)
		}
		select {
		case <-wctx.Done():
		case <-time.After(time.Second):
		}
	}
	cards, err := jsstore.Open(ctx, m.nc, jsstore.Config{Replicas: r, MaxCardBytes: cfg.MaxCardBytes})
	if err != nil {
		return fmt.Errorf("mesh: replicated CardStore: %w", err)
	}
	m.cards = cards
	m.push(func(context.Context) error { return cards.Close() })
	reg, err := jsreg.Open(ctx, js, jsreg.Config{Replicas: r})
	if err != nil {
		return fmt.Errorf("mesh: replicated registry: %w", err)
	}
	m.reg = reg
	m.push(func(context.Context) error { return reg.Close() })
	if cfg.Auth != nil {
		pol, err := jspolicy.Open(ctx, js, jspolicy.Config{Replicas: r})
		if err != nil {
			return fmt.Errorf("mesh: replicated policies: %w", err)
		}
		m.policies = pol // natsauthz closes it
	}
	m.inboxBucket, err = inbox.OpenBucket(ctx, js, "", r)
	if err != nil {
		return fmt.Errorf("mesh: replicated inbox: %w", err)
	}
	log.Info("mesh state is replicated in JetStream", "replicas", r)
	return nil
}
