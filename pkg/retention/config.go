package retention

import (
	"context"
	"fmt"

	"github.com/utpmesh/utpmesh/pkg/authz"
)

// ConfigSource reads the projects' configurations (authz.ProjectConfig),
// where an operator sets a project's retention (`utpmesh turns
// retention`): the policy store of the mesh, or its NATS client.
type ConfigSource interface {
	Config(ctx context.Context, project string) (authz.ProjectConfig, error)
}

// FromConfigs is a PolicySource over the projects' configurations.
type FromConfigs struct{ Configs ConfigSource }

var _ PolicySource = FromConfigs{}

// Policy returns the project's retention policy; found is false when its
// configuration sets none.
func (f FromConfigs) Policy(ctx context.Context, project string) (Policy, bool, error) {
	c, err := f.Configs.Config(ctx, project)
	if err != nil {
		return Policy{}, false, err
	}
	return PolicyOf(c.Retention)
}

// PolicyOf converts a stored retention configuration; nil is no policy
// (found false).
func PolicyOf(r *authz.ProjectRetention) (p Policy, found bool, err error) {
	if r == nil {
		return Policy{}, false, nil
	}
	age, err := r.Age()
	if err != nil {
		return Policy{}, false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	p = Policy{MaxAge: age, MaxBytes: r.MaxBytes}
	if err := p.Check(); err != nil {
		return Policy{}, false, err
	}
	return p, !p.Zero(), nil
}

// Stored is p as a project's configuration stores it (nil for the zero
// Policy).
func (p Policy) Stored() *authz.ProjectRetention {
	if p.Zero() {
		return nil
	}
	r := &authz.ProjectRetention{MaxBytes: p.MaxBytes}
	if p.MaxAge > 0 {
		r.MaxAge = p.MaxAge.String()
	}
	return r
}
