package mesh

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/pkg/admit"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
)

// The single-node CardStore can be told of the admission's Puts.
var _ admit.CardAnnouncer = (*boltstore.Store)(nil)

// startAdmission serves svc.dispatch: the node's admission key
// (<DataDir>/admission.key), its public key added to the key set (the
// replicated bucket when the state is replicated, so every node verifies
// every node's admissions) and the gate when Config.Auth is set. A mesh
// without Auth admits every call (and logs that it does).
func (m *Mesh) startAdmission(ctx context.Context) error {
	cfg := m.cfg
	key, err := admit.LoadOrCreateKey(cfg.DataDir)
	if err != nil {
		return err
	}
	var keys admit.KeySet = &admit.LocalKeys{}
	if m.admitKeys != nil { // opened with the replicated state (openReplicated)
		keys = m.admitKeys
	}
	var gate *authz.Gate
	if m.auth != nil {
		gate = m.auth.Gate
	}
	// A connection of its own: its command publishes and their acks do not
	// queue behind the traffic of the svc servers and the worker on m.nc.
	nc, err := m.dial("utpmesh-admission")
	if err != nil {
		return fmt.Errorf("mesh: admission connection: %w", err)
	}
	m.push(func(context.Context) error { nc.Close(); return nil })
	// The single-node CardStore is the one every worker starts its calls
	// on (natsstore serves it to remote workers), so a new call's command
	// may be published beside its card's commit: StartCall waits for the
	// announced Put, the in-process worker's starts on the announced card
	// (workerStore). Never with the replicated store.
	// With async command streams its command is also kept in the node
	// file's outbox, in the card's commit (outbox.go).
	store, beside := m.cards.(*boltstore.Store)
	acfg := admit.Config{Version: cfg.ProtocolVersion, Store: m.cards, Registry: m.reg,
		Audit: &natsauthz.Publisher{NC: nc, Logger: cfg.Logger.With("component", "admission")},
		Gate:  gate, Key: key, Keys: keys, Logger: cfg.Logger.With("component", "admission"), Quorum: m.quorum(),
		PublishBesideCard: beside}
	if beside && m.asyncStreams() {
		acfg.Outbox = outboxPut(store)
	}
	m.admit, err = admit.Start(ctx, nc, acfg)
	if err != nil {
		return err
	}
	m.push(m.admit.Stop)
	return nil
}

// quorum is the admission's Config.Quorum: the embedded server's view
// (embednats.Server.Quorum: can this node have JetStream leaders now).
// On a joined deployment (Config.External) the mesh sees no server, and
// a command is resent until admit.Config.PublishBound.
func (m *Mesh) quorum() func() error {
	if m.srv == nil {
		return nil
	}
	return m.srv.Quorum
}

// dial opens another connection of the mesh's own (the core identity's
// options): to the embedded server, or to the external deployment
// (Config.External) with its credentials.
func (m *Mesh) dial(name string) (*nats.Conn, error) {
	opts := append(slices.Clone(m.connOpts), nats.Name(name))
	if e := m.cfg.External; e != nil {
		return nats.Connect(e.URL, opts...)
	}
	return m.srv.Connect(opts...)
}
