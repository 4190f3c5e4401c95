package natsinbox

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// Client talks to the inbox service over NATS. Its errors match the
// sentinels of package inbox (and svc's transport errors) with errors.Is.
type Client struct {
	ep svc.Endpoint
	// agent, when set (NewAgentClient), sends inbox.AgentOps on the
	// agent's own subjects.
	agent string
}

var _ inbox.API = (*Client)(nil)

// NewClient returns a client of the inbox service reachable on nc,
// configured with the options every service client shares
// (svc.WithVersion, svc.WithChannel, svc.WithTimeout).
func NewClient(nc *nats.Conn, opts ...svc.ClientOption) (*Client, error) {
	ep, err := svc.NewClientEndpoint(nc, inbox.ServiceName, inbox.Codes, opts...)
	if err != nil {
		return nil, fmt.Errorf("natsinbox: %w", err)
	}
	ep.Ops = inbox.Ops
	return &Client{ep: ep}, nil
}

// NewAgentClient returns a client for one agent's runtime: list, get, ack
// and set_epoch (inbox.AgentOps) go to the agent's own subjects,
// cg.<ver>.<project>.<channel>.svc.inbox.<op>.<agent> (subjects.AgentService),
// the only inbox subjects a per-agent identity may use, on which the
// service serves that agent's entries and turns only. Other operations use
// the plain subjects, as NewClient's do.
func NewAgentClient(nc *nats.Conn, agentID string, opts ...svc.ClientOption) (*Client, error) {
	if err := subjects.ValidateToken("agent_id", agentID); err != nil {
		return nil, fmt.Errorf("natsinbox: NewAgentClient: %w (an agent id is a subject token, e.g. demo-agent)", err)
	}
	c, err := NewClient(nc, opts...)
	if err != nil {
		return nil, err
	}
	c.agent = agentID
	return c, nil
}

// Agent returns the agent of a client made by NewAgentClient, or "".
func (c *Client) Agent() string { return c.agent }

func (c *Client) call(ctx context.Context, project, op string, req, resp any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := inbox.CheckProject(project); err != nil {
		return err
	}
	if c.agent != "" && slices.Contains(inbox.AgentOps, op) {
		subj, err := c.ep.ToolSubject(project, op, c.agent)
		if err != nil {
			return fmt.Errorf("%w: %v", inbox.ErrInvalid, err)
		}
		return c.ep.Send(ctx, subj, false, req, resp)
	}
	return c.ep.Call(ctx, project, op, req, resp)
}

// List returns the agent's entries in the project that match q, in
// creation order.
func (c *Client) List(ctx context.Context, project string, q inbox.ListQuery) ([]inbox.Entry, error) {
	var r inbox.ListReply
	if err := c.call(ctx, project, inbox.OpList, q, &r); err != nil {
		return nil, err
	}
	if r.Entries == nil {
		r.Entries = []inbox.Entry{}
	}
	return r.Entries, nil
}

// Get returns one entry of the project, or an error matching ErrNotFound.
func (c *Client) Get(ctx context.Context, project, inboxID string) (*inbox.Entry, error) {
	var r inbox.GetReply
	if err := c.call(ctx, project, inbox.OpGet, inbox.GetRequest{InboxID: inboxID}, &r); err != nil {
		return nil, err
	}
	if r.Entry == nil {
		return nil, fmt.Errorf("%w: get %s: reply has no entry", svc.ErrBadReply, inboxID)
	}
	return r.Entry, nil
}

// Ack marks entries of the project acked and returns how many were pending.
// An id with no entry fails the whole call with an error matching
// ErrNotFound that names it. A request unanswered for an attempt (2 s) is
// sent again (inbox.Ops); when a copy's answer comes first, the entries
// the first copy acked are not counted.
func (c *Client) Ack(ctx context.Context, project string, inboxIDs ...string) (int, error) {
	if len(inboxIDs) == 0 {
		return 0, fmt.Errorf("%w: inbox_ids is empty", inbox.ErrInvalid)
	}
	var r inbox.AckReply
	if err := c.call(ctx, project, inbox.OpAck, inbox.AckRequest{InboxIDs: inboxIDs}, &r); err != nil {
		return 0, err
	}
	return r.Acked, nil
}

// AckLazy is Ack replying before the ack is on disk (see inbox.API.AckLazy).
func (c *Client) AckLazy(ctx context.Context, project string, inboxIDs ...string) (int, error) {
	if len(inboxIDs) == 0 {
		return 0, fmt.Errorf("%w: inbox_ids is empty", inbox.ErrInvalid)
	}
	var r inbox.AckReply
	if err := c.call(ctx, project, inbox.OpAck, inbox.AckRequest{InboxIDs: inboxIDs, Lazy: true}, &r); err != nil {
		return 0, err
	}
	return r.Acked, nil
}

// DeleteTurn removes the turn's entries for retention, on the
// delete_turn operation (mesh core and admin identities only); see
// inbox.Backend's DeleteTurn.
func (c *Client) DeleteTurn(ctx context.Context, project, agentTurnID string) (int, error) {
	var r inbox.DeleteTurnReply
	if err := c.call(ctx, project, inbox.OpDeleteTurn, inbox.DeleteTurnRequest{AgentTurnID: agentTurnID}, &r); err != nil {
		return 0, err
	}
	return r.Deleted, nil
}

// SetEpoch raises the turn's highest epoch to epoch (never lowers it) and
// returns the highest epoch now.
func (c *Client) SetEpoch(ctx context.Context, project, agentTurnID string, epoch int64) (int64, error) {
	var r inbox.SetEpochReply
	if err := c.call(ctx, project, inbox.OpSetEpoch, inbox.SetEpochRequest{AgentTurnID: agentTurnID, TurnEpoch: &epoch}, &r); err != nil {
		return 0, err
	}
	return r.TurnEpoch, nil
}
