package natsstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// Client is a cardstore.Store that talks to a Server over NATS.
//
// Calls whose context names a tool (cardstore.WithTool, which the worker
// runtime sets) start calls, claim and release on the tool's own subject
// (svc.cardstore.start_call.<tool>, claim.<tool>, release.<tool>). A tool.result card with
// metadata.function_name is written with put_result.<tool of the card>,
// carrying the claim (holder, fencing token) this client took for the
// call, which the server checks. Other writes use the plain subjects,
// which only the mesh core and admin may publish for claims and results.
type Client struct {
	ep svc.Endpoint
	// agent, when set (NewAgentClient), sends the AgentOps on the agent's
	// own subjects.
	agent string

	mu     sync.Mutex
	claims map[claimID]heldClaim // tool-scoped claims this client holds
}

// claimID names a claim: project and key.
type claimID struct{ project, key string }

// heldClaim is a claim this client took: what a result is written under.
type heldClaim struct {
	holder  string
	token   uint64
	expires time.Time
}

// maxHeld bounds the remembered claims: beyond it, those whose lease ended
// over a minute ago are forgotten (their holder gave up or died).
const maxHeld = 4096

var _ cardstore.Store = (*Client)(nil)

// NewClient returns a Store backed by the CardStore service reachable on nc.
func NewClient(nc *nats.Conn, opts ...svc.ClientOption) (*Client, error) {
	ep, err := svc.NewClientEndpoint(nc, ServiceName, Codes, opts...)
	if err != nil {
		return nil, fmt.Errorf("natsstore: %w", err)
	}
	ep.Ops = Ops
	return &Client{ep: ep, claims: map[claimID]heldClaim{}}, nil
}

// NewAgentClient returns a Store for one agent's runtime: the AgentOps
// (put, get, get_many, list_turn, find_result, the boxes, list_turns) go
// to the agent's own subjects, cg.<ver>.<project>.<channel>.svc.cardstore.<op>.<agent>
// (subjects.AgentService), the only ones a per-agent identity may use, on
// which the server serves that agent's cards and turns only (AgentOps
// says what is the agent's). Other operations use the plain subjects, as
// NewClient's do.
func NewAgentClient(nc *nats.Conn, agentID string, opts ...svc.ClientOption) (*Client, error) {
	if err := subjects.ValidateToken("agent_id", agentID); err != nil {
		return nil, fmt.Errorf("natsstore: NewAgentClient: %w (an agent id is a subject token, e.g. demo-agent)", err)
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
	if c.agent != "" && isAgentOp(op) {
		return c.callTool(ctx, project, op, c.agent, req, resp)
	}
	return c.mapErr(c.ep.Call(ctx, project, op, req, resp))
}

// mapErr turns a svc error into the cardstore errors callers expect.
func (c *Client) mapErr(err error) error {
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
	_, err := c.PutWithEntry(ctx, cards...)
	return err
}

var _ cardstore.EntryPutter = (*Client)(nil)

// PutWithEntry is Put that returns the put_result reply's inbox_entry
// (cardstore.EntryPutter): true when the server's store stored the
// inbox entry of the batch's tool.result in the same commit; false from
// a server that does not say so (a replicated store, an older server).
func (c *Client) PutWithEntry(ctx context.Context, cards ...*card.Card) (bool, error) {
	if len(cards) == 0 {
		return false, nil
	}
	if len(cards) > cardstore.MaxBatch {
		return false, fmt.Errorf("%w: %d cards in one Put, the limit is %d", cardstore.ErrTooLarge, len(cards), cardstore.MaxBatch)
	}
	for i, cd := range cards {
		if cd == nil {
			return false, fmt.Errorf("%w: cards[%d] is nil", cardstore.ErrInvalid, i)
		}
		if err := cd.Validate(); err != nil {
			return false, fmt.Errorf("%w: cards[%d]: %v", cardstore.ErrInvalid, i, err)
		}
		if cd.ProjectID != cards[0].ProjectID {
			return false, fmt.Errorf("%w: cards[%d] belongs to project %q and cards[0] to %q: one Put over NATS holds one project's cards",
				cardstore.ErrInvalid, i, cd.ProjectID, cards[0].ProjectID)
		}
	}
	if err := card.ValidateName("project_id", cards[0].ProjectID); err != nil {
		return false, fmt.Errorf("%w: %v", cardstore.ErrInvalid, err)
	}
	op, tool := OpPut, ""
	var result *card.Card
	for _, cd := range cards {
		if cd.Type == card.TypeToolResult {
			op, result = OpPutResult, cd
			if tool == "" {
				tool = cd.Metadata.FunctionName
			}
		}
	}
	var reply putReply
	if result == nil || tool == "" {
		err := c.call(ctx, cards[0].ProjectID, op, putRequest{Cards: cards}, &reply)
		return err == nil && reply.InboxEntry, err
	}
	id := claimID{cards[0].ProjectID, cardstore.CallKey{AgentTurnID: result.Metadata.AgentTurnID, ToolCallID: result.ToolCallID}.String()}
	req := putRequest{Cards: cards}
	c.mu.Lock()
	if h, ok := c.claims[id]; ok {
		req.Claim = &claimRef{Holder: h.holder, Token: h.token}
	}
	c.mu.Unlock()
	if req.Claim == nil && cardstore.ToolFrom(ctx) == "" {
		// Not a worker's result (no tool-scoped claim, no tool in ctx):
		// the core's or admin's plain put_result.
		err := c.call(ctx, cards[0].ProjectID, op, req, &reply)
		return err == nil && reply.InboxEntry, err
	}
	err := c.callTool(ctx, cards[0].ProjectID, op, tool, req, &reply)
	if err == nil || errors.Is(err, cardstore.ErrResultExists) || errors.Is(err, cardstore.ErrClaimLost) {
		c.forget(id) // the result ended the claim, or another holder owns it
	}
	return err == nil && reply.InboxEntry, err
}

// callTool sends one request on the tool-scoped subject of op.
func (c *Client) callTool(ctx context.Context, project, op, tool string, req, resp any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	subj, err := c.ep.ToolSubject(project, op, tool)
	if err != nil {
		return fmt.Errorf("%w: %v", cardstore.ErrInvalid, err)
	}
	return c.mapErr(c.ep.Send(ctx, subj, false, req, resp))
}

func (c *Client) forget(id claimID) {
	c.mu.Lock()
	delete(c.claims, id)
	c.mu.Unlock()
}

func (c *Client) remember(id claimID, cl *cardstore.Claim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.claims) >= maxHeld {
		old := time.Now().Add(-time.Minute)
		for k, h := range c.claims {
			if h.expires.Before(old) {
				delete(c.claims, k)
			}
		}
	}
	c.claims[id] = heldClaim{holder: cl.Holder, token: cl.Token, expires: cl.ExpiresAt}
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
	var r turnPage
	wire := listTurnRequest{AgentTurnID: req.AgentTurnID, After: req.After, Limit: req.Limit}
	if err := c.call(ctx, req.ProjectID, OpListTurn, wire, &r); err != nil {
		return nil, err
	}
	return (*cardstore.ListTurnResult)(&r), nil
}

// DecodeReply implements svc.ReplyDecoder: a get or find_result reply in
// the form the server writes ({"card":<card>}) is decoded in one pass
// (card.Parse), anything else with encoding/json.
func (r *cardReply) DecodeReply(data []byte) error {
	if rest, ok := bytes.CutPrefix(data, []byte(cardHead)); ok {
		if body, ok := bytes.CutSuffix(rest, []byte("}")); ok && len(body) > 0 && body[0] == '{' {
			if c, err := card.Parse(body); err == nil {
				r.Card = c
				return nil
			}
		}
	}
	type plain cardReply // without this method
	return json.Unmarshal(data, (*plain)(r))
}

// turnPage is a list_turn reply. It decodes the form the server writes
// ({"cards":[…]} with an optional "next") in one pass (card.ParseList),
// anything else with encoding/json.
type turnPage cardstore.ListTurnResult

// DecodeReply implements svc.ReplyDecoder.
func (p *turnPage) DecodeReply(data []byte) error {
	if rest, ok := bytes.CutPrefix(data, []byte(pageHead)); ok {
		if cards, n, err := card.ParseList(rest); err == nil {
			if next, ok := pageTail(rest[n:]); ok {
				p.Cards, p.Next = cards, next
				return nil
			}
		}
	}
	return json.Unmarshal(data, (*cardstore.ListTurnResult)(p))
}

// pageTail reads what follows the cards of a list_turn reply the server
// wrote: "}" or ,"next":<n>}.
func pageTail(b []byte) (uint64, bool) {
	if string(b) == "}" {
		return 0, true
	}
	digits, ok := bytes.CutPrefix(b, []byte(pageNext))
	if !ok {
		return 0, false
	}
	digits, ok = bytes.CutSuffix(digits, []byte("}"))
	if !ok || len(digits) == 0 || len(digits) > 20 || digits[0] == '0' {
		return 0, false
	}
	n, err := strconv.ParseUint(string(digits), 10, 64)
	return n, err == nil
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

// DeleteTurn implements cardstore.Store, on the delete_turn operation
// (mesh core and admin identities only).
func (c *Client) DeleteTurn(ctx context.Context, projectID, agentTurnID string) (int, error) {
	var r deleteTurnReply
	if err := c.call(ctx, projectID, OpDeleteTurn, deleteTurnRequest{AgentTurnID: agentTurnID}, &r); err != nil {
		return 0, err
	}
	return r.Deleted, nil
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

// Claim implements cardstore.Store. The lease travels in whole
// milliseconds. With a tool in ctx (cardstore.WithTool) the claim is taken
// on the tool's subject and remembered for the call's result.
func (c *Client) Claim(ctx context.Context, req cardstore.ClaimRequest) (*cardstore.Claim, error) {
	var r claimReply
	wire := claimRequest{Key: req.Key, Holder: req.Holder, LeaseMS: req.Lease.Milliseconds()}
	tool := cardstore.ToolFrom(ctx)
	if tool == "" {
		if err := c.plain(ctx, req.ProjectID, req.Key, OpClaim, OpClaimKey, wire, &r); err != nil {
			return nil, err
		}
		return r.Claim, nil
	}
	if err := c.callTool(ctx, req.ProjectID, OpClaim, tool, wire, &r); err != nil {
		return nil, err
	}
	if r.Claim == nil {
		return nil, fmt.Errorf("%w: claim reply without a claim", svc.ErrBadReply)
	}
	c.remember(claimID{req.ProjectID, req.Key}, r.Claim)
	return r.Claim, nil
}

// Release implements cardstore.Store; with a tool in ctx it releases on
// the tool's subject.
func (c *Client) Release(ctx context.Context, projectID, key, holder string) error {
	tool := cardstore.ToolFrom(ctx)
	if tool == "" {
		return c.plain(ctx, projectID, key, OpRelease, OpReleaseKey, claimRequest{Key: key, Holder: holder}, &emptyReply{})
	}
	err := c.callTool(ctx, projectID, OpRelease, tool, claimRequest{Key: key, Holder: holder}, &emptyReply{})
	if err == nil || errors.Is(err, cardstore.ErrClaimLost) {
		c.forget(claimID{projectID, key})
	}
	return err
}

// plain sends a claim, release or get_claim without a tool in the
// context: callOp for a tool call's key (the core's and admin's), else
// keyOp on the subject of the service that owns the key,
// svc.cardstore.<keyOp>.<ToolToken(service)> for a key <service>/…,
// which only that service's worker identity (and the core, admin) may
// publish; the server refuses a key outside the subject's service. A key
// with no service goes to the plain keyOp, which only the core and admin
// may publish.
func (c *Client) plain(ctx context.Context, project, key, callOp, keyOp string, req, resp any) error {
	if isToolCallKey(key) {
		return c.call(ctx, project, callOp, req, resp)
	}
	owner, err := LeaseOwner(key)
	if err != nil {
		return c.call(ctx, project, keyOp, req, resp) // no owner: the core's and admin's
	}
	return c.callTool(ctx, project, keyOp, owner, req, resp)
}

// LeaseOwner returns the service that owns a lease key <service>/…; a key
// without one is cardstore.ErrInvalid.
func LeaseOwner(key string) (string, error) {
	owner, _, ok := strings.Cut(key, "/")
	if !ok || owner == "" {
		return "", fmt.Errorf("%w: lease key %q: want <service>/<name>, the service that owns the lease first (e.g. atlas.tasks/state)", cardstore.ErrInvalid, key)
	}
	return owner, nil
}

// GetClaim implements cardstore.Store: a tool call's claim on the plain
// get_claim, another lease on its service's subject (see plain).
func (c *Client) GetClaim(ctx context.Context, projectID, key string) (*cardstore.Claim, error) {
	var r claimReply
	if err := c.plain(ctx, projectID, key, OpGetClaim, OpGetClaim, getClaimRequest{Key: key}, &r); err != nil {
		return nil, err
	}
	return r.Claim, nil
}

// StartCall implements cardstore.Store for a worker: it sends start_call
// on the subject of the tool ctx names (cardstore.WithTool), and
// remembers the claim it returns for the call's result, like Claim. The
// lease travels in whole milliseconds. Without a tool in ctx it fails
// with cardstore.ErrInvalid: a tool call's claim is taken on its tool's
// subject only, which NATS permissions give that tool's workers (the core
// and admin use FindToolResult, Claim and Get).
func (c *Client) StartCall(ctx context.Context, req cardstore.StartCallRequest) (*cardstore.StartCallResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tool := cardstore.ToolFrom(ctx)
	if tool == "" {
		return nil, cardstore.Invalid("StartCall over NATS is a worker's request on its tool's subject (svc.cardstore.%s.<tool>): pass a context from cardstore.WithTool(ctx, toolName); without a tool use FindToolResult, Claim and Get", OpStartCall)
	}
	wire := startCallRequest{AgentTurnID: req.AgentTurnID, ToolCallID: req.ToolCallID, ToolCallCardID: req.ToolCallCardID,
		Holder: req.Holder, LeaseMS: req.Lease.Milliseconds()}
	var r cardstore.StartCallResult
	if err := c.callTool(ctx, req.ProjectID, OpStartCall, tool, wire, &r); err != nil {
		return nil, err
	}
	switch {
	case r.Result != nil:
		return &cardstore.StartCallResult{Result: r.Result}, nil
	case r.Claim == nil:
		return nil, fmt.Errorf("%w: %s reply holds neither a result nor a claim", svc.ErrBadReply, OpStartCall)
	}
	c.remember(claimID{req.ProjectID, cardstore.CallKey{AgentTurnID: req.AgentTurnID, ToolCallID: req.ToolCallID}.String()}, r.Claim)
	return &r, nil
}
