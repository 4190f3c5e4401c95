package mesh

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore/jsstore"
	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/pkg/admit"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/jspolicy"
	"github.com/utpmesh/utpmesh/pkg/inbox/kvinbox"
	"github.com/utpmesh/utpmesh/pkg/registry/jsreg"
	"github.com/utpmesh/utpmesh/pkg/streams"
)

// clusterWait bounds how long a cluster node waits for the JetStream
// cluster to form (enough nodes up for a quorum) before giving up.
const clusterWait = 2 * time.Minute

// awaitMeta waits (bounded by clusterWait, logging) until this cluster
// node's JetStream knows its meta leader: the routes are up. The mesh's
// own connection is made only then. Found the hard way: with the
// connection (and its reply subscription) made while the nodes were still
// dialling each other, three nodes started at the same instant lost every
// JetStream API reply for minutes, although the requests took effect.
func (m *Mesh) awaitMeta(ctx context.Context) error {
	ns := m.srv.NATS()
	start, next := time.Now(), time.Now().Add(5*time.Second)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for !ns.JetStreamIsCurrent() {
		if time.Since(start) > clusterWait {
			return fmt.Errorf("mesh: no JetStream meta leader after %v (routes up: %d of %d): are the other nodes up and reachable on their --cluster-listen addresses?",
				clusterWait, ns.NumRoutes(), len(m.cfg.Cluster.Routes)-1)
		}
		if time.Now().After(next) {
			m.cfg.Logger.Info("waiting for the cluster's JetStream meta leader", "routes", ns.NumRoutes(), "nodes", len(m.cfg.Cluster.Routes), "waited", time.Since(start).Round(time.Second))
			next = time.Now().Add(5 * time.Second)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

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
	start := time.Now()
	retry := func(what string, step func(context.Context) error) error { return m.patiently(ctx, what, r, step) }
	if err := retry("streams", func(c context.Context) error {
		return streams.Ensure(c, js, cfg.ProtocolVersion, streams.WithReplicas(r))
	}); err != nil {
		return err
	}
	if err := retry("CardStore", func(c context.Context) error {
		cards, err := jsstore.Open(c, m.nc, jsstore.Config{Replicas: r, MaxCardBytes: cfg.MaxCardBytes, Quorum: m.quorum()})
		if err != nil {
			return err
		}
		m.cards = cards
		m.push(func(context.Context) error { return cards.Close() })
		return nil
	}); err != nil {
		return err
	}
	if err := retry("registry", func(c context.Context) error {
		reg, err := jsreg.Open(c, js, jsreg.Config{Replicas: r})
		if err != nil {
			return err
		}
		m.reg = reg
		m.push(func(context.Context) error { return reg.Close() })
		return nil
	}); err != nil {
		return err
	}
	if cfg.Auth != nil {
		if err := retry("policies", func(c context.Context) error {
			pol, err := jspolicy.Open(c, js, jspolicy.Config{Replicas: r})
			if err != nil {
				return err
			}
			m.policies = pol
			m.push(func(context.Context) error { return pol.Close() })
			return nil
		}); err != nil {
			return err
		}
	}
	if err := retry("inbox", func(c context.Context) error {
		bk, err := kvinbox.OpenBucket(c, js, "", r)
		if err != nil {
			return err
		}
		kv := kvinbox.New(bk)
		m.inboxStore = kv
		// Runs after the inbox service's Stop: waits for its last marks.
		m.push(func(context.Context) error { return kv.Close() })
		return nil
	}); err != nil {
		return err
	}
	if err := retry("admission keys", func(c context.Context) error {
		keys, err := admit.OpenKVKeys(c, js, r)
		m.admitKeys = keys
		return err
	}); err != nil {
		return err
	}
	log.Info("mesh state is replicated in JetStream", "replicas", r, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// Patiently runs step, the creation of replicated state (a catalogue
// service's buckets, say), the way the mesh opens its own: on replicated
// state, retried until it succeeds while the JetStream cluster forms or a
// loaded machine answers slowly, for up to two minutes (each attempt
// bounded); otherwise once.
func (m *Mesh) Patiently(ctx context.Context, what string, step func(context.Context) error) error {
	if m.cfg.Replicated == nil {
		return step(ctx)
	}
	return m.patiently(ctx, what, m.replicas(), step)
}

// patiently runs one step until it succeeds: while the cluster forms (or
// on a loaded machine) creating a replicated stream can time out; a retry
// finds what the last attempt made.
func (m *Mesh) patiently(ctx context.Context, what string, r int, step func(context.Context) error) error {
	log := m.cfg.Logger
	start := time.Now()
	// A request sent before the cluster has a meta leader gets no answer,
	// nor do some of several nodes creating one asset at once: try again
	// soon, then with more patience (a loaded machine creates a
	// replicated stream slowly). Other errors are retried after a second.
	waiting := func(err error) bool {
		log.Info("waiting for the JetStream cluster", "step", what, "replicas", r, "waited", time.Since(start).Round(time.Second), "err", err)
		return true
	}
	err := deadline.Patiently(ctx, clusterWait, waiting, func(ctx context.Context) error {
		err := step(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			waiting(err) // Patiently retries a timed-out attempt without asking
		}
		return err
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("mesh: %s: the JetStream cluster did not accept %d-replica streams within %v (are %d nodes up and routed to each other?): %w", what, r, clusterWait, r, err)
	}
	return err
}
