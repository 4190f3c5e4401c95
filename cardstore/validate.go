package cardstore

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// The argument rules every Store applies before it touches storage, in one
// place so that every implementation accepts exactly the same requests
// (the conformance suite checks the errors). Each returns an error
// matching ErrInvalid that names the field.

// Invalid returns an error matching ErrInvalid with a message.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// CheckProject validates a project id argument.
func CheckProject(projectID string) error {
	if err := card.ValidateName("project_id", projectID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// CheckCardID validates a card id argument.
func CheckCardID(field, id string) error {
	if !card.ValidID(id) {
		return Invalid("%s %q is not a canonical lower-case UUID", field, id)
	}
	return nil
}

// CheckKeyPart validates an agent_turn_id, tool_call_id or agent_id that a
// store makes part of a key: non-empty, at most card.MaxIDLen bytes, valid
// UTF-8 (the canonical JSON would silently replace invalid bytes) and no
// NUL.
func CheckKeyPart(field, s string) error {
	switch {
	case s == "":
		return Invalid("%s is required", field)
	case len(s) > card.MaxIDLen:
		return Invalid("%s is longer than %d bytes", field, card.MaxIDLen)
	case !utf8.ValidString(s):
		return Invalid("%s %q is not valid UTF-8", field, s)
	case strings.IndexByte(s, 0) >= 0:
		return Invalid("%s %q contains a NUL character", field, s)
	}
	return nil
}

// CheckClaimString validates a claim key or holder.
func CheckClaimString(field, s string) error {
	if s == "" {
		return Invalid("%s is required", field)
	}
	if len(s) > MaxKeyLen {
		return Invalid("%s is %d bytes, longer than %d", field, len(s), MaxKeyLen)
	}
	return nil
}

// CheckBoxCards validates the card ids of a box operation: at most
// MaxBatch, each a card id (not that the cards exist).
func CheckBoxCards(cardIDs []string) error {
	if len(cardIDs) > MaxBatch {
		return fmt.Errorf("%w: box operation with %d card ids exceeds the batch limit of %d", ErrTooLarge, len(cardIDs), MaxBatch)
	}
	for i, id := range cardIDs {
		if err := CheckCardID(fmt.Sprintf("card_ids[%d]", i), id); err != nil {
			return err
		}
	}
	return nil
}

// CheckGetMany validates the arguments of a GetMany (the project; at most
// MaxBatch ids, each a card id) and returns the ids in request order with
// duplicates removed.
func CheckGetMany(projectID string, cardIDs []string) ([]string, error) {
	if err := CheckProject(projectID); err != nil {
		return nil, err
	}
	if len(cardIDs) > MaxBatch {
		return nil, fmt.Errorf("%w: get of %d cards exceeds the batch limit of %d", ErrTooLarge, len(cardIDs), MaxBatch)
	}
	ids := make([]string, 0, len(cardIDs))
	seen := make(map[string]bool, len(cardIDs))
	for i, id := range cardIDs {
		if err := CheckCardID(fmt.Sprintf("card_ids[%d]", i), id); err != nil {
			return nil, err
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// CheckCall validates the arguments naming one call of a project: the
// project, agent_turn_id and tool_call_id.
func CheckCall(projectID, agentTurnID, toolCallID string) error {
	if err := CheckProject(projectID); err != nil {
		return err
	}
	if err := CheckKeyPart("agent_turn_id", agentTurnID); err != nil {
		return err
	}
	return CheckKeyPart("tool_call_id", toolCallID)
}

// CheckAppendBox validates the arguments of AppendBox: the project, the
// box id and the card ids.
func CheckAppendBox(projectID, boxID string, cardIDs []string) error {
	if err := CheckProject(projectID); err != nil {
		return err
	}
	if err := card.ValidateBoxID(boxID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return CheckBoxCards(cardIDs)
}

// CheckStartCall validates a StartCallRequest: the call, the card id when
// one is given, the holder, the lease, and the length of the call's claim
// key (CallKey).
func CheckStartCall(req StartCallRequest) error {
	if err := CheckCall(req.ProjectID, req.AgentTurnID, req.ToolCallID); err != nil {
		return err
	}
	if req.ToolCallCardID != "" {
		if err := CheckCardID("tool_call_card_id", req.ToolCallCardID); err != nil {
			return err
		}
	}
	if err := CheckClaimString("holder", req.Holder); err != nil {
		return err
	}
	if err := CheckLease(req.Lease); err != nil {
		return err
	}
	if k := (CallKey{req.AgentTurnID, req.ToolCallID}).String(); len(k) > MaxKeyLen {
		return Invalid("the claim key %q of agent_turn_id and tool_call_id is %d bytes, longer than %d: use shorter ids", k[:32]+"…", len(k), MaxKeyLen)
	}
	return nil
}

// CheckLease validates a claim's lease: at least MinLease, at most
// MaxLease.
func CheckLease(lease time.Duration) error {
	if lease < MinLease || lease > MaxLease {
		return Invalid("lease %v is outside %v..%v", lease, MinLease, MaxLease)
	}
	return nil
}
