package natsstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// ServiceName is the service token of the CardStore's svc subjects:
// cg.<ver>.<project>.<channel>.svc.cardstore.<op>.
const ServiceName = "cardstore"

// The operations, the last token of the subject.
const (
	OpPut        = "put"
	OpGet        = "get"
	OpGetMany    = "get_many"
	OpListTurn   = "list_turn"
	OpFindResult = "find_result"
	OpBoxCreate  = "box_create"
	OpBoxAppend  = "box_append"
	OpBoxGet     = "box_get"
	OpClaim      = "claim"
	OpRelease    = "release"
	OpListTurns  = "list_turns"
	OpGetClaim   = "get_claim"
	// OpPutResult is put for batches that hold a tool.result card: put
	// refuses them, so NATS permissions can keep agent identities (which
	// may put other cards) from writing results (docs/security.md).
	OpPutResult = "put_result"
	// OpClaimKey and OpReleaseKey are claim and release of a key that is
	// not a tool call's (cardstore.CallKey): a service's own leases
	// (ATLAS's scheduler, state holders). Worker identities may use them
	// but not claim and release, so a tool call's claim is taken only on
	// its tool's subject (svc.cardstore.claim.<tool>).
	OpClaimKey   = "claim_key"
	OpReleaseKey = "release_key"
	// OpStartCall is a worker's start of a call, on its tool's subject
	// only (svc.cardstore.start_call.<tool>): the call's result if it has
	// one, else its claim and its tool.call card (cardstore.Store's
	// StartCall).
	OpStartCall = "start_call"
	// OpDeleteTurn removes a turn for retention (cardstore.Store's
	// DeleteTurn). Only the mesh core and admins may use it: no role's
	// NATS permissions list it.
	OpDeleteTurn = "delete_turn"
)

// Ops says which requests a client resends while unanswered (svc.Ops):
// reads, and the writes of cards, whose identical repeat stores nothing
// and succeeds (cardstore.Store's Put). A claim is sent once (a copy
// would renew it and lose its taken_over), so are releases, boxes (a
// copy would append twice) and deletes.
var Ops = svc.Ops{
	OpPut: svc.Deduped, OpPutResult: svc.Deduped,
	OpGet: svc.Read, OpGetMany: svc.Read, OpListTurn: svc.Read, OpFindResult: svc.Read,
	OpBoxGet: svc.Read, OpListTurns: svc.Read, OpGetClaim: svc.Read,
	OpBoxCreate: svc.Once, OpBoxAppend: svc.Once, OpClaim: svc.Once, OpRelease: svc.Once,
	OpClaimKey: svc.Once, OpReleaseKey: svc.Once, OpStartCall: svc.Once, OpDeleteTurn: svc.Once,
}

// Wire error codes of the CardStore service (besides svc's common ones).
const (
	CodeNotFound     = svc.CodeNotFound
	CodeConflict     = svc.CodeConflict
	CodeResultExists = "result_exists"
	CodeClaimHeld    = "claim_held"
	CodeClaimLost    = "claim_lost"
	CodeClosed       = "closed"
	// CodeWrongOp: the operation does not take this request (a
	// tool.result card sent with put instead of put_result).
	CodeWrongOp = "wrong_op"
	// CodeForbidden: a tool-scoped write the writer may not make
	// (cardstore.ErrForbidden): a claim or result for another tool's
	// call, or a result written without the call's claim.
	CodeForbidden = svc.CodeForbidden
)

// ErrWrongOp matches (errors.Is) a wrong_op reply: tool.result cards
// must be written with put_result.
var ErrWrongOp = errors.New("natsstore: wrong operation")

// Codes maps cardstore's sentinel errors to wire codes and back.
var Codes = svc.Codes{
	{Err: cardstore.ErrNotFound, Code: CodeNotFound},
	{Err: cardstore.ErrConflict, Code: CodeConflict},
	{Err: cardstore.ErrResultExists, Code: CodeResultExists},
	{Err: cardstore.ErrClaimHeld, Code: CodeClaimHeld},
	{Err: cardstore.ErrClaimLost, Code: CodeClaimLost},
	{Err: cardstore.ErrInvalid, Code: svc.CodeBadRequest},
	{Err: card.ErrInvalid, Code: svc.CodeBadRequest},
	{Err: cardstore.ErrTooLarge, Code: svc.CodeTooLarge},
	{Err: cardstore.ErrClosed, Code: CodeClosed},
	{Err: ErrWrongOp, Code: CodeWrongOp},
	{Err: cardstore.ErrForbidden, Code: CodeForbidden},
}

// Request and reply bodies, one pair per operation. See docs/protocol.md.
type (
	putRequest struct {
		Cards []*card.Card `json:"cards"`
		// Claim is the claim a tool-scoped put_result is written under.
		Claim *claimRef `json:"claim,omitempty"`
	}
	claimRef struct {
		Holder string `json:"holder"`
		Token  uint64 `json:"token"`
	}
	putReply struct {
		Count int `json:"count"`
		// InboxEntry, put_result only: the commit that stored the
		// batch's tool.result card stored (or found) its call's inbox
		// entry too (cardstore.EntryPutter); omitted when false.
		InboxEntry bool `json:"inbox_entry,omitempty"`
	}
	getRequest struct {
		CardID string `json:"card_id"`
	}
	cardReply struct {
		Card *card.Card `json:"card"`
	}
	getManyRequest struct {
		CardIDs []string `json:"card_ids"`
	}
	listTurnRequest struct {
		AgentTurnID string `json:"agent_turn_id"`
		After       uint64 `json:"after,omitempty"`
		Limit       int    `json:"limit,omitempty"`
	}
	listTurnsRequest struct {
		AgentID string `json:"agent_id,omitempty"`
		Before  uint64 `json:"before,omitempty"`
		Limit   int    `json:"limit,omitempty"`
	}
	findResultRequest struct {
		AgentTurnID string `json:"agent_turn_id"`
		ToolCallID  string `json:"tool_call_id"`
	}
	boxRequest struct {
		BoxID   string   `json:"box_id"`
		CardIDs []string `json:"card_ids,omitempty"`
	}
	boxReply struct {
		Box *card.Box `json:"box"`
	}
	claimRequest struct {
		Key     string `json:"key"`
		Holder  string `json:"holder"`
		LeaseMS int64  `json:"lease_ms,omitempty"`
	}
	startCallRequest struct {
		AgentTurnID    string `json:"agent_turn_id"`
		ToolCallID     string `json:"tool_call_id"`
		ToolCallCardID string `json:"tool_call_card_id,omitempty"`
		Holder         string `json:"holder"`
		LeaseMS        int64  `json:"lease_ms,omitempty"`
	}
	// The start_call reply is a cardstore.StartCallResult:
	// {"result": card} or {"claim": claim, "call_card": card}.
	deleteTurnRequest struct {
		AgentTurnID string `json:"agent_turn_id"`
	}
	deleteTurnReply struct {
		Deleted int `json:"deleted"`
	}
	getClaimRequest struct {
		Key string `json:"key"`
	}
	claimReply struct {
		Claim *cardstore.Claim `json:"claim"`
	}
	claimHeldDetail struct {
		Holder    string    `json:"holder"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	emptyReply struct{}
)

// decode is svc.Decode for the CardStore's requests, which first refuses
// a body holding invalid UTF-8 with the JSON path of the string that
// holds it (cards[0].metadata.agent_id): encoding/json would replace the
// bytes with U+FFFD, and the card stored would not be the card sent.
func decode(data []byte, v any) error {
	if err := card.CheckUTF8("", data); err != nil {
		return fmt.Errorf("%w: request body: %w", cardstore.ErrInvalid, err)
	}
	return svc.Decode(data, v)
}
