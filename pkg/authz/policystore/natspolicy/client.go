package natspolicy

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// Client reads and writes a project's policies over the authz service.
// It is a policystore.Store: it passes policystoretest over a real
// nats-server (see doc.go for what differs from a local store).
type Client struct {
	ep     svc.Endpoint
	closed atomic.Bool
}

var _ policystore.Store = (*Client)(nil)

// NewClient returns a client on nc for protocol version ver ("" = default).
func NewClient(nc *nats.Conn, ver string) (*Client, error) {
	if nc == nil {
		return nil, errors.New("natspolicy: nil NATS connection")
	}
	ep := svc.NewEndpoint(nc, ServiceName, Codes)
	if ver != "" {
		ep.Version = ver
	}
	return &Client{ep: ep}, nil
}

// Close makes every later call fail with authz.ErrClosed; it sends
// nothing, does not close the NATS connection (the caller's) and is
// idempotent. The store behind the service stays open.
func (c *Client) Close() error {
	c.closed.Store(true)
	return nil
}

// begin checks what a local store checks before its storage is touched,
// in the same order (policystore.Versioned): the project id (an error
// wrapping authz.ErrInvalidRequest, as the server would reply), the
// context, and whether the client is closed.
func (c *Client) begin(ctx context.Context, project string) error {
	if err := policystore.CheckProject(project); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.closed.Load() {
		return fmt.Errorf("natspolicy: client: %w", authz.ErrClosed)
	}
	return nil
}

// call sends an unsigned read of op after begin.
func (c *Client) call(ctx context.Context, project, op string, req, resp any) error {
	if err := c.begin(ctx, project); err != nil {
		return err
	}
	return c.ep.Call(ctx, project, op, req, resp)
}

// PutPolicies validates and stores the project's policy set.
func (c *Client) PutPolicies(ctx context.Context, project, text string) (*authz.PolicyDoc, error) {
	var r DocReply
	if err := c.signedCall(ctx, project, OpPut, PutRequest{Policies: text}, &r); err != nil {
		return nil, err
	}
	if r.Doc == nil {
		return nil, fmt.Errorf("%w: reply has no doc", svc.ErrBadReply)
	}
	return r.Doc, nil
}

// ReplacePolicies stores text as the project's policy set if the stored
// version is still base (0: none stored); else the error wraps
// authz.ErrConflict.
func (c *Client) ReplacePolicies(ctx context.Context, project, text string, base uint64) (*authz.PolicyDoc, error) {
	var r DocReply
	if err := c.signedCall(ctx, project, OpPut, PutRequest{Policies: text, BaseVersion: &base}, &r); err != nil {
		return nil, err
	}
	if r.Doc == nil {
		return nil, fmt.Errorf("%w: reply has no doc", svc.ErrBadReply)
	}
	return r.Doc, nil
}

// History lists the kept versions of the project's policy set, newest
// first.
func (c *Client) History(ctx context.Context, project string) ([]authz.PolicyVersion, error) {
	var r HistoryReply
	if err := c.call(ctx, project, OpHistory, struct{}{}, &r); err != nil {
		return nil, err
	}
	return r.Versions, nil
}

// PolicyVersion returns one kept version with its text.
func (c *Client) PolicyVersion(ctx context.Context, project string, version uint64) (*authz.PolicyDoc, error) {
	var r DocReply
	if err := c.call(ctx, project, OpHistoryGet, HistoryGetRequest{Version: version}, &r); err != nil {
		return nil, err
	}
	if r.Doc == nil {
		return nil, fmt.Errorf("%w: reply has no doc", svc.ErrBadReply)
	}
	return r.Doc, nil
}

// Rollback restores a kept version as a new version, if the stored
// version is still base.
func (c *Client) Rollback(ctx context.Context, project string, version, base uint64) (*authz.PolicyDoc, error) {
	var r DocReply
	if err := c.signedCall(ctx, project, OpRollback, RollbackRequest{Version: version, BaseVersion: base}, &r); err != nil {
		return nil, err
	}
	if r.Doc == nil {
		return nil, fmt.Errorf("%w: reply has no doc", svc.ErrBadReply)
	}
	return r.Doc, nil
}

// Policies returns the project's policy set.
func (c *Client) Policies(ctx context.Context, project string) (*authz.PolicyDoc, error) {
	var r DocReply
	if err := c.call(ctx, project, OpGet, struct{}{}, &r); err != nil {
		return nil, err
	}
	if r.Doc == nil {
		return nil, fmt.Errorf("%w: reply has no doc", svc.ErrBadReply)
	}
	return r.Doc, nil
}

// Config returns the project's config. On an error it returns mandate
// "required" with it, as a local store does (policystore.Versioned.Config).
func (c *Client) Config(ctx context.Context, project string) (authz.ProjectConfig, error) {
	var r ConfigReply
	if err := c.call(ctx, project, OpConfigGet, struct{}{}, &r); err != nil {
		return authz.ProjectConfig{Mandate: authz.MandateRequired}, err
	}
	return r.Config, nil
}

// PutConfig stores the project's config.
func (c *Client) PutConfig(ctx context.Context, project string, cfg authz.ProjectConfig) error {
	return c.signedCall(ctx, project, OpConfigPut, cfg, &ConfigReply{})
}

var _ authz.PolicyHistory = (*Client)(nil)
