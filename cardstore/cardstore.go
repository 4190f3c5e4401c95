package cardstore

import (
	"context"
	"errors"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// Errors returned by every Store implementation, local or remote. Remote
// implementations map them to and from wire error codes, so errors.Is works
// the same on both sides of NATS.
var (
	// ErrNotFound: the card, box, tool result or claim does not exist in the
	// project asked for. A card of another project is also "not found".
	ErrNotFound = errors.New("cardstore: not found")
	// ErrConflict: a card with this id exists with other bytes, or a box with
	// this id already exists. Cards are immutable.
	ErrConflict = errors.New("cardstore: conflict")
	// ErrResultExists: the (project, agent_turn_id, tool_call_id) pair already
	// has a different tool.result card. A call has exactly one result.
	ErrResultExists = errors.New("cardstore: tool result already exists")
	// ErrClaimHeld: the claim is held by another holder whose lease has not
	// expired.
	ErrClaimHeld = errors.New("cardstore: claim held by another holder")
	// ErrClaimLost: a release or renewal by a holder that no longer holds
	// the claim (it expired and was taken over, or never existed).
	ErrClaimLost = errors.New("cardstore: claim not held by this holder")
	// ErrInvalid: the request breaks a rule: a malformed card or id, a
	// missing field. The message names what is wrong.
	ErrInvalid = errors.New("cardstore: invalid request")
	// ErrTooLarge: a card, batch or box exceeds a configured limit.
	ErrTooLarge = errors.New("cardstore: too large")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("cardstore: closed")
	// ErrForbidden: the writer may not do this for this call: a claim or
	// tool.result for a call of another tool, or a tool.result written
	// without holding the call's claim. Only tool-scoped writes
	// (natsstore's claim, release and put_result on a tool's subject)
	// are checked this way; the message names the rule.
	ErrForbidden = errors.New("cardstore: forbidden")
)

// toolKey is the context key of WithTool.
type toolKey struct{}

// WithTool marks store calls made with the returned context as made on
// behalf of tool (a tool name). A remote store (natsstore) sends the
// claims, releases and tool.result writes of such calls on the tool's own
// subject, which NATS permissions let only that tool's workers use; the
// worker runtime marks every call of a job. A local store ignores it.
func WithTool(ctx context.Context, tool string) context.Context {
	return context.WithValue(ctx, toolKey{}, tool)
}

// ToolFrom returns the tool WithTool put in ctx, or "".
func ToolFrom(ctx context.Context) string {
	t, _ := ctx.Value(toolKey{}).(string)
	return t
}

// Store is the CardStore: immutable cards, boxes, and claims, isolated by
// project. Every method is safe for concurrent use. Every write is durable
// (on disk) when the method returns nil, except the in-memory call claims
// the package documentation allows.
type Store interface {
	// Put stores cards atomically: all of them or none. Re-putting a card
	// with identical canonical bytes is a no-op success; other bytes under the
	// same id fail with ErrConflict; a second, different tool.result for the
	// same (project, agent_turn_id, tool_call_id) fails with ErrResultExists.
	// All cards of one Put belong to one project; mixing projects is
	// ErrInvalid (a remote Put is scoped by its subject's project).
	// Storing a new tool.result ends the claim on its call's CallKey,
	// whoever holds it, in the same write; the key's next claim gets a
	// larger token than the ended one (see ClaimRequest).
	Put(ctx context.Context, cards ...*card.Card) error
	// Get returns one card of the project, or ErrNotFound.
	Get(ctx context.Context, projectID, cardID string) (*card.Card, error)
	// GetMany returns the cards of the project with the given ids, in request
	// order with duplicates removed; ids with no card are listed in Missing.
	GetMany(ctx context.Context, projectID string, cardIDs []string) (*GetManyResult, error)
	// ListTurn returns a page of the cards whose metadata.agent_turn_id is
	// the given turn, in write order.
	ListTurn(ctx context.Context, req ListTurnRequest) (*ListTurnResult, error)
	// FindToolResult returns the tool.result card of (agent_turn_id,
	// tool_call_id) in the project, or ErrNotFound.
	FindToolResult(ctx context.Context, projectID, agentTurnID, toolCallID string) (*card.Card, error)
	// ListTurns returns a page of the project's turns, newest first; see
	// ListTurnsRequest for the order, the filter and the cursor.
	ListTurns(ctx context.Context, req ListTurnsRequest) (*ListTurnsResult, error)

	// CreateBox creates a box holding cardIDs (which must exist in the
	// project). An empty boxID gets a new UUIDv7. An existing boxID fails
	// with ErrConflict.
	CreateBox(ctx context.Context, projectID, boxID string, cardIDs []string) (*card.Box, error)
	// AppendBox appends cardIDs (which must exist) to an existing box and
	// returns the box as it is after the append.
	AppendBox(ctx context.Context, projectID, boxID string, cardIDs []string) (*card.Box, error)
	// GetBox returns a box, or ErrNotFound.
	GetBox(ctx context.Context, projectID, boxID string) (*card.Box, error)

	// Claim acquires, renews or takes over the lease on a key; see
	// ClaimRequest for the rules. It fails with ErrClaimHeld (wrapped in a
	// *ClaimHeldError naming the holder) when another live holder has it.
	Claim(ctx context.Context, req ClaimRequest) (*Claim, error)
	// Release gives a claim up. It fails with ErrClaimLost when the holder
	// does not hold it (any more).
	Release(ctx context.Context, projectID, key, holder string) error
	// GetClaim returns the claim on a key without taking or renewing it,
	// with Expired judged by the store's clock, or ErrNotFound when the key
	// has no claim (never claimed, or released).
	GetClaim(ctx context.Context, projectID, key string) (*Claim, error)

	// StartCall is how a worker begins a call, in one request: when the
	// call (ProjectID, AgentTurnID, ToolCallID) has a tool.result card it
	// returns it in Result and takes no claim; otherwise it takes the
	// call's claim (CallKey) under ClaimRequest's rules — renewal,
	// take-over, ErrClaimHeld — and returns it with the card named
	// ToolCallCardID (CallCard; nil when the project has no such card, or
	// ToolCallCardID is empty). The result check and the claim are atomic:
	// a claim is returned only if the call had no result when the claim
	// was taken, so a result written before StartCall always wins, and one
	// written after it finds the claim taken (and ends it, as every new
	// result does). A call that has a result returns it even while someone
	// holds its claim. A remote store (natsstore) serves StartCall only on
	// the tool's own subject: the context must name the tool (WithTool).
	StartCall(ctx context.Context, req StartCallRequest) (*StartCallResult, error)

	// DeleteTurn removes a turn for retention, in one atomic write: every
	// card whose metadata.agent_turn_id is agentTurnID, the turn's
	// tool-result index, its summary (ListTurns no longer lists it) and
	// the ended claims (tombstones) of its calls. It returns how many
	// cards it removed; a turn the project does not have removes nothing
	// and is no error. A call of the turn whose claim is live (a claim with
	// no result, expired or not: the call is running or was abandoned
	// mid-way) makes it fail with ErrClaimHeld and remove nothing. Boxes
	// are kept: ids they hold may then name no card. A remote store serves
	// it on an operation only the mesh core and admins may use.
	DeleteTurn(ctx context.Context, projectID, agentTurnID string) (int, error)
}

// StartCallRequest asks to begin one call: its result if it has one,
// else its claim and its tool.call card.
type StartCallRequest struct {
	// ProjectID, AgentTurnID and ToolCallID name the call; the claim is
	// taken on CallKey{AgentTurnID, ToolCallID}.String().
	ProjectID   string `json:"project_id"`
	AgentTurnID string `json:"agent_turn_id"`
	ToolCallID  string `json:"tool_call_id"`
	// ToolCallCardID names the card returned as CallCard (the command's
	// tool_call_card_id); empty to read none.
	ToolCallCardID string `json:"tool_call_card_id,omitempty"`
	// Holder and Lease are the claim's, as in ClaimRequest.
	Holder string        `json:"holder"`
	Lease  time.Duration `json:"lease"`
}

// StartCallResult is the answer to StartCall: either Result, or Claim
// (with CallCard when the card exists).
type StartCallResult struct {
	// Result is the call's tool.result card when it has one; Claim and
	// CallCard are then nil.
	Result *card.Card `json:"result,omitempty"`
	// Claim is the call's claim, now held by the request's holder.
	Claim *Claim `json:"claim,omitempty"`
	// CallCard is the card named ToolCallCardID, nil when the project has
	// no such card. It is returned as stored: whether it is the call's
	// tool.call card is the caller's to check.
	CallCard *card.Card `json:"call_card,omitempty"`
}

// GetManyResult is the answer to GetMany.
type GetManyResult struct {
	// Cards are the found cards, in request order.
	Cards []*card.Card `json:"cards"`
	// Missing are the requested ids that have no card in the project.
	Missing []string `json:"missing"`
}

// ListTurnRequest asks for one page of a turn's cards.
type ListTurnRequest struct {
	// ProjectID and AgentTurnID select the turn.
	ProjectID   string `json:"project_id"`
	AgentTurnID string `json:"agent_turn_id"`
	// After is the cursor: return cards written after this position (0: from
	// the start). Pass the previous page's Next.
	After uint64 `json:"after,omitempty"`
	// Limit caps the page size; 0 or more than MaxPage means MaxPage.
	Limit int `json:"limit,omitempty"`
}

// ListTurnResult is one page of a turn's cards.
type ListTurnResult struct {
	// Cards are in write order.
	Cards []*card.Card `json:"cards"`
	// Next is the cursor for the following page; 0 when this was the last.
	Next uint64 `json:"next,omitempty"`
}

// ListTurnsRequest asks for one page of a project's turns, newest first.
// A turn's place in the order is the store position of its first card, so
// a page boundary never moves while new cards are written.
type ListTurnsRequest struct {
	// ProjectID selects the project.
	ProjectID string `json:"project_id"`
	// AgentID, when set, keeps only the turns whose TurnInfo.AgentID is
	// this metadata.agent_id. At most card.MaxIDLen bytes.
	AgentID string `json:"agent_id,omitempty"`
	// Before is the cursor: return turns that began before this position
	// (0: from the newest). Pass the previous page's Next.
	Before uint64 `json:"before,omitempty"`
	// Limit caps the page size; 0 or more than MaxPage means MaxPage;
	// negative is ErrInvalid.
	Limit int `json:"limit,omitempty"`
}

// TurnInfo summarizes one turn of a project.
type TurnInfo struct {
	// AgentTurnID is the turn's id (metadata.agent_turn_id of its cards).
	AgentTurnID string `json:"agent_turn_id"`
	// AgentID is metadata.agent_id of the turn's first card that names
	// one, in write order ("" while none does: tool.result cards, for
	// instance, usually carry no agent_id).
	AgentID string `json:"agent_id"`
	// FirstAt and LastAt are the created_at of the turn's first and latest
	// cards in write order.
	FirstAt time.Time `json:"first_at"`
	LastAt  time.Time `json:"last_at"`
	// Cards counts the turn's cards; ToolCalls and ToolResults count its
	// tool.call and tool.result cards.
	Cards       int `json:"cards"`
	ToolCalls   int `json:"tool_calls"`
	ToolResults int `json:"tool_results"`
	// Bytes is the sum of the turn's cards' canonical encodings (what
	// retention's size limit counts); 0 for cards written by a version
	// that did not count it.
	Bytes int64 `json:"bytes,omitempty"`
}

// ListTurnsResult is one page of a project's turns.
type ListTurnsResult struct {
	// Turns are newest first (by the position of their first card).
	Turns []TurnInfo `json:"turns"`
	// Next is the cursor for the following (older) page; 0 when this was
	// the last.
	Next uint64 `json:"next,omitempty"`
}

// ClaimRequest asks for the lease on a key.
//
// The rules, applied atomically with the store's clock:
//   - no claim on the key: the holder gets it with Token 1, or, when the
//     key's last claim was ended by its call's tool.result (Put), with
//     that claim's Token + 1 (not a take-over);
//   - the same holder holds it: the lease is renewed, Token unchanged;
//   - another holder holds it and its lease has not expired: ErrClaimHeld;
//   - another holder's lease has expired: the holder takes it over,
//     Token+1 and TakenOver true.
type ClaimRequest struct {
	// ProjectID scopes the key.
	ProjectID string `json:"project_id"`
	// Key names what is claimed. A tool call's key is its CallKey's
	// String, "toolcall/<agent_turn_id>/<tool_call_id>" with '/' and '%'
	// escaped in the agent_turn_id.
	Key string `json:"key"`
	// Holder identifies the claimant (a worker instance id).
	Holder string `json:"holder"`
	// Lease is how long the claim lasts without renewal; at least
	// MinLease and at most MaxLease.
	Lease time.Duration `json:"lease"`
}

// Claim is a held lease.
type Claim struct {
	ProjectID string `json:"project_id"`
	Key       string `json:"key"`
	Holder    string `json:"holder"`
	// Token is a fencing token: it grows by one on every take-over.
	Token uint64 `json:"token"`
	// ExpiresAt is when the lease lapses unless renewed (store clock).
	ExpiresAt time.Time `json:"expires_at"`
	// TakenOver reports that this acquisition replaced an expired claim of
	// another holder.
	TakenOver bool `json:"taken_over,omitempty"`
	// PreviousHolder is the holder whose expired claim was taken over.
	PreviousHolder string `json:"previous_holder,omitempty"`
	// Expired reports that the lease had lapsed, by the store's clock, when
	// GetClaim read it: the holder may still renew or release it, and
	// anyone else may take it over. Only GetClaim sets it.
	Expired bool `json:"expired,omitempty"`
}

// ClaimHeldError is returned (wrapping ErrClaimHeld) when another live
// holder has the claim.
type ClaimHeldError struct {
	Holder    string
	ExpiresAt time.Time
}

func (e *ClaimHeldError) Error() string {
	return "cardstore: claim held by " + e.Holder + " until " + e.ExpiresAt.UTC().Format(time.RFC3339Nano)
}

// Unwrap makes errors.Is(err, ErrClaimHeld) true.
func (e *ClaimHeldError) Unwrap() error { return ErrClaimHeld }

// Limits every implementation enforces. Local stores may lower the card size
// limit through their options.
const (
	// DefaultMaxCardBytes is the default limit on one card's canonical encoding.
	DefaultMaxCardBytes = 1 << 20
	// MaxBatch is the most cards one Put, GetMany or box operation takes.
	MaxBatch = 1000
	// MaxPage is the largest ListTurn and ListTurns page.
	MaxPage = 1000
	// MaxBoxCards is the most card ids one box holds.
	MaxBoxCards = 16384
	// MaxKeyLen is the longest claim key or holder, in bytes.
	MaxKeyLen = 512
	// MinLease and MaxLease bound a claim's lease.
	MinLease = 100 * time.Millisecond
	MaxLease = 24 * time.Hour
)

// AllTurn reads every card of a turn by following ListTurn pages.
func AllTurn(ctx context.Context, s Store, projectID, agentTurnID string) ([]*card.Card, error) {
	var out []*card.Card
	req := ListTurnRequest{ProjectID: projectID, AgentTurnID: agentTurnID, Limit: MaxPage}
	for {
		page, err := s.ListTurn(ctx, req)
		if err != nil {
			return out, err
		}
		out = append(out, page.Cards...)
		if page.Next == 0 {
			return out, nil
		}
		req.After = page.Next
	}
}
