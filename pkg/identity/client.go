package identity

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// Client talks to the identity service.
type Client struct {
	ep svc.Endpoint
}

// NewClient returns a client of the identity service reachable on nc.
func NewClient(nc *nats.Conn, opts ...svc.ClientOption) (*Client, error) {
	ep, err := svc.NewClientEndpoint(nc, ServiceName, Codes, opts...)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	return &Client{ep: ep}, nil
}

// List returns every identity the mesh admits.
func (c *Client) List(ctx context.Context) ([]Entry, error) {
	var r ListReply
	if err := c.ep.Call(ctx, Project, OpList, struct{}{}, &r); err != nil {
		return nil, err
	}
	return r.Identities, nil
}

// Add admits id (its Key set, the seed kept by the caller) and returns
// the list after.
func (c *Client) Add(ctx context.Context, id meshauth.Identity) ([]Entry, error) {
	var r ListReply
	if err := c.ep.Call(ctx, Project, OpAdd, AddRequest{Identity: id}, &r); err != nil {
		return nil, err
	}
	return r.Identities, nil
}

// Remove drops the added identity named name: its connections are closed
// and it can connect no more.
func (c *Client) Remove(ctx context.Context, name string) ([]Entry, error) {
	var r ListReply
	if err := c.ep.Call(ctx, Project, OpRemove, RemoveRequest{Name: name}, &r); err != nil {
		return nil, err
	}
	return r.Identities, nil
}
