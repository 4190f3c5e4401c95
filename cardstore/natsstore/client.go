package natsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// DefaultChannel is the channel token a Client uses unless told otherwise.
const DefaultChannel = "default"

// ClientOption configures a Client.
type ClientOption func(*Client) error

// WithVersion sets the protocol version token (default subjects.DefaultVersion).
func WithVersion(ver string) ClientOption {
	return func(c *Client) error {
		if err := subjects.ValidateToken("version", ver); err != nil {
			return fmt.Errorf("natsstore: WithVersion: %w", err)
		}
		c.ep.Version = ver
		return nil
	}
}

// WithChannel sets the channel token of the request subjects (default
// DefaultChannel). The channel does not isolate cards; the project does.
func WithChannel(channel string) ClientOption {
	return func(c *Client) error {
		if err := subjects.ValidateToken("channel_id", channel); err != nil {
			return fmt.Errorf("natsstore: WithChannel: %w", err)
		}
		c.ep.Channel = channel
		return nil
	}
}

// WithTimeout sets the timeout of a request whose context has no deadline
// (default svc.DefaultTimeout).
func WithTimeout(d time.Duration) ClientOption {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("natsstore: WithTimeout: %v is not a positive duration", d)
		}
		c.ep.Timeout = d
		return nil
	}
}

// Client is a cardstore.Store that talks to a Server over NATS.
type Client struct {
	ep svc.Endpoint
}

var _ cardstore.Store = (*Client)(nil)

// NewClient returns a Store backed by the CardStore service reachable on nc.
func NewClient(nc *nats.Conn, opts ...ClientOption) (*Client, error) {
	if nc == nil {
		return nil, errors.New("natsstore: nil NATS connection")
	}
	c := &Client{ep: svc.NewEndpoint(nc, ServiceName, Codes)}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Client) call(ctx context.Context, project, op string, req, resp any) error {
	err := c.ep.Call(ctx, project, op, req, resp)
	var re *svc.RemoteError
	if errors.As(err, &re) && re.Code == CodeClaimHeld {
		var d claimHeldDetail
		if json.Unmarshal(re.Detail, &d) == nil && d.Holder != "" {
			return &cardstore.ClaimHeldError{Holder: d.Holder, ExpiresAt: d.ExpiresAt}
		}
	}
	switch {
	case errors.As(err, &re):
		return err
	case errors.Is(err, svc.ErrTooLarge):
		return fmt.Errorf("%w: %v", cardstore.ErrTooLarge, err)
	case errors.Is(err, svc.ErrBadRequest):
		return fmt.Errorf("%w: %v", cardstore.ErrInvalid, err)
	}
	return err
}

// Put implements cardstore.Store. All cards of one Put must belong to one
// project: the project chooses the subject, and the server refuses cards of
// any other project.
func (c *Client) Put(ctx context.Context, cards ...*card.Card) error {
	if len(cards) == 0 {
		return nil
	}
	if len(cards) > cardstore.MaxBatch {
		return fmt.Errorf("%w: %d cards in one Put, the limit is %d", cardstore.ErrTooLarge, len(cards), cardstore.MaxBatch)
	}
	for i, cd := range cards {
		if cd == nil {
			return fmt.Errorf("%w: cards[%d] is nil", cardstore.ErrInvalid, i)
		}
		if err := cd.Validate(); err != nil {
			return fmt.Errorf("%w: cards[%d]: %v", cardstore.ErrInvalid, i, err)
		}
		if cd.ProjectID != cards[0].ProjectID {
			return fmt.Errorf("%w: cards[%d] belongs to project %q and cards[0] to %q: one Put over NATS holds one project's cards",
				cardstore.ErrInvalid, i, cd.ProjectID, cards[0].ProjectID)
		}
	}
	if err := card.ValidateName("project_id", cards[0].ProjectID); err != nil {
		return fmt.Errorf("%w: %v", cardstore.ErrInvalid, err)
	}
	op := OpPut
	for _, cd := range cards {
		if cd.Type == card.TypeToolResult {
			op = OpPutResult
		}
	}
	return c.call(ctx, cards[0].ProjectID, op, putRequest{Cards: cards}, &putReply{})
}

// Get implements cardstore.Store.
func (c *Client) Get(ctx context.Context, projectID, cardID string) (*card.Card, error) {
	var r cardReply
	if err := c.call(ctx, projectID, OpGet, getRequest{CardID: cardID}, &r); err != nil {
		return nil, err
	}
	return r.Card, nil
}

// GetMany implements cardstore.Store.
func (c *Client) GetMany(ctx context.Context, projectID string, cardIDs []string) (*cardstore.GetManyResult, error) {
	var r cardstore.GetManyResult
	if err := c.call(ctx, projectID, OpGetMany, getManyRequest{CardIDs: cardIDs}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// ListTurn implements cardstore.Store.
func (c *Client) ListTurn(ctx context.Context, req cardstore.ListTurnRequest) (*cardstore.ListTurnResult, error) {
	var r cardstore.ListTurnResult
	wire := listTurnRequest{AgentTurnID: req.AgentTurnID, After: req.After, Limit: req.Limit}
	if err := c.call(ctx, req.ProjectID, OpListTurn, wire, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// ListTurns implements cardstore.Store.
func (c *Client) ListTurns(ctx context.Context, req cardstore.ListTurnsRequest) (*cardstore.ListTurnsResult, error) {
	var r cardstore.ListTurnsResult
	wire := listTurnsRequest{AgentID: req.AgentID, Before: req.Before, Limit: req.Limit}
	if err := c.call(ctx, req.ProjectID, OpListTurns, wire, &r); err != nil {
		return nil, err
	}
	if r.Turns == nil {
		r.Turns = []cardstore.TurnInfo{}
	}
	return &r, nil
}

// FindToolResult implements cardstore.Store.
func (c *Client) FindToolResult(ctx context.Context, projectID, agentTurnID, toolCallID string) (*card.Card, error) {
	var r cardReply
	req := findResultRequest{AgentTurnID: agentTurnID, ToolCallID: toolCallID}
	if err := c.call(ctx, projectID, OpFindResult, req, &r); err != nil {
		return nil, err
	}
	return r.Card, nil
}

// CreateBox implements cardstore.Store.
func (c *Client) CreateBox(ctx context.Context, projectID, boxID string, cardIDs []string) (*card.Box, error) {
	return c.box(ctx, projectID, OpBoxCreate, boxRequest{BoxID: boxID, CardIDs: cardIDs})
}

// AppendBox implements cardstore.Store.
func (c *Client) AppendBox(ctx context.Context, projectID, boxID string, cardIDs []string) (*card.Box, error) {
	return c.box(ctx, projectID, OpBoxAppend, boxRequest{BoxID: boxID, CardIDs: cardIDs})
}

// GetBox implements cardstore.Store.
func (c *Client) GetBox(ctx context.Context, projectID, boxID string) (*card.Box, error) {
	return c.box(ctx, projectID, OpBoxGet, boxRequest{BoxID: boxID})
}

func (c *Client) box(ctx context.Context, projectID, op string, req boxRequest) (*card.Box, error) {
	var r boxReply
	if err := c.call(ctx, projectID, op, req, &r); err != nil {
		return nil, err
	}
	return r.Box, nil
}

// Claim implements cardstore.Store. The lease travels in whole milliseconds.
func (c *Client) Claim(ctx context.Context, req cardstore.ClaimRequest) (*cardstore.Claim, error) {
	var r claimReply
	wire := claimRequest{Key: req.Key, Holder: req.Holder, LeaseMS: req.Lease.Milliseconds()}
	if err := c.call(ctx, req.ProjectID, OpClaim, wire, &r); err != nil {
		return nil, err
	}
	return r.Claim, nil
}

// Release implements cardstore.Store.
func (c *Client) Release(ctx context.Context, projectID, key, holder string) error {
	return c.call(ctx, projectID, OpRelease, claimRequest{Key: key, Holder: holder}, &emptyReply{})
}

// GetClaim implements cardstore.Store.
func (c *Client) GetClaim(ctx context.Context, projectID, key string) (*cardstore.Claim, error) {
	var r claimReply
	if err := c.call(ctx, projectID, OpGetClaim, getClaimRequest{Key: key}, &r); err != nil {
		return nil, err
	}
	return r.Claim, nil
}
