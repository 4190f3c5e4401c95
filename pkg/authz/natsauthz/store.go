package natsauthz

import (
	"path/filepath"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/boltpolicy"
)

// openStore returns cfg.Store, or opens <DataDir>/policies.db (boltpolicy)
// validating policies against the actions of the project's tools in
// cfg.Registry.
func openStore(cfg StartConfig) (policystore.Store, error) {
	if cfg.Store != nil {
		return cfg.Store, nil
	}
	st, err := boltpolicy.Open(filepath.Join(cfg.DataDir, "policies.db"), boltpolicy.WithActions(authz.RegistryActions{Registry: cfg.Registry}))
	if err != nil {
		return nil, err
	}
	return st, nil
}
