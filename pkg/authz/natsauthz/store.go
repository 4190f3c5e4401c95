package natsauthz

import (
	"path/filepath"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore"
)

// Store is the policy store a Service serves and its gate reads: a policy
// history (put, replace, rollback, history) that can be closed. The bbolt
// policystore (the default) and the JetStream KV jspolicy (cluster mode)
// implement it; both pass policystoretest.
type Store interface {
	authz.PolicyHistory
	// Close releases the store; later calls fail with authz.ErrClosed.
	Close() error
}

var _ Store = (*policystore.Store)(nil)

// openStore returns cfg.Store, or opens <DataDir>/policies.db validating
// policies against the actions of the project's tools in cfg.Registry.
func openStore(cfg StartConfig) (Store, error) {
	if cfg.Store != nil {
		return cfg.Store, nil
	}
	st, err := policystore.Open(filepath.Join(cfg.DataDir, "policies.db"), policystore.WithActions(authz.RegistryActions{Registry: cfg.Registry}))
	if err != nil {
		return nil, err
	}
	return st, nil
}
