package mcpbridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// ErrMandateRefused is returned for a bearer mandate the mesh's policy
// service does not accept (bad signature, unknown key, expired, another
// project's).
var ErrMandateRefused = errors.New("mcpbridge: mandate refused")

// maxVerified bounds the cache of verified tokens; it is emptied when full.
const maxVerified = 4096

// verify checks an HTTP caller's mandate with the mesh's policy service
// (the query that verifies it) before the bridge acts for its agent, so an
// unsigned token cannot make the bridge open clients for made-up agents.
// A verified token is remembered until it expires. A mesh that serves no
// policy service (no gate) checks no mandates, and neither does verify.
func (b *Bridge) verify(ctx context.Context, token string) error {
	now := time.Now()
	b.mu.Lock()
	until, ok := b.verified[token]
	b.mu.Unlock()
	if ok && now.Before(until) {
		return nil
	}
	_, err := b.authz.Query(ctx, b.cfg.Project, natsauthz.QueryRequest{Mandate: token})
	switch {
	case errors.Is(err, natsauthz.ErrMandate):
		return fmt.Errorf("%w for project %s: %v", ErrMandateRefused, b.cfg.Project, err)
	case errors.Is(err, svc.ErrUnavailable):
		b.log.Warn("mcp: the mesh serves no policy service; the bearer mandate is not verified here (the workers' gate, if any, still checks it)", "err", err)
		return nil
	case err != nil:
		return fmt.Errorf("verify the mandate with the mesh's policy service: %w", err)
	}
	m, err := mandate.Decode(token)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMandateRefused, err)
	}
	b.mu.Lock()
	if len(b.verified) >= maxVerified {
		b.verified = map[string]time.Time{}
	}
	b.verified[token] = m.Expires()
	b.mu.Unlock()
	return nil
}
