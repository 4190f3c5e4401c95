package card

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/utpmesh/utpmesh/subjects"
)

// Well-known card types. Type is free-form; these are the ones the mesh reads.
const (
	TypeToolCall        = "tool.call"
	TypeToolResult      = "tool.result"
	TypeTaskInstruction = "task.instruction"
	TypeAgentThought    = "agent.thought"
	TypeTaskDeliverable = "task.deliverable"
)

// Limits on the shape of a card. The CardStore applies its own (configurable)
// limit on the encoded size of a card on top of these.
const (
	// MaxIDLen is the longest id (project, agent, turn, tool call, step, box)
	// accepted anywhere in a card, in bytes.
	MaxIDLen = 256
	// MaxTypeLen is the longest card type, in bytes.
	MaxTypeLen = 128
)

// Errors returned by Decode and Validate. They are wrapped with a message
// that names the offending field; test with errors.Is.
var (
	// ErrInvalid reports a card, content or box that breaks a rule of this
	// package: a missing field, a malformed id, content of the wrong shape.
	ErrInvalid = errors.New("card: invalid")
	// ErrWrongType reports an attempt to read the content of a card as a type
	// it is not (ToolCall on a tool.result card, for example).
	ErrWrongType = errors.New("card: wrong card type")
)

// Card is one immutable fact in the CardStore.
type Card struct {
	// CardID is the card's UUID (version 7 recommended), canonical lower-case form.
	CardID string `json:"card_id"`
	// ProjectID is the project (tenant) the card belongs to. Required.
	ProjectID string `json:"project_id"`
	// Type is the semantic type, e.g. "tool.call". Required.
	Type string `json:"type"`
	// AuthorID is who wrote the card (an agent, a tool service), for audit only.
	AuthorID string `json:"author_id,omitempty"`
	// Content is the card's payload, any JSON value. tool.call and
	// tool.result cards need an object; for other types an absent content
	// is stored as null.
	Content json.RawMessage `json:"content"`
	// Metadata carries the routing and trace fields of the card.
	Metadata Metadata `json:"metadata"`
	// ToolCallID is the tool call this card belongs to; required on tool.call
	// and tool.result cards and then equal to Metadata.ToolCallID when that is set.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// CreatedAt is when the writer created the card. Required.
	CreatedAt time.Time `json:"created_at"`
}

// NewID returns a new card id: a UUID version 7 in canonical form.
func NewID() string {
	id, err := uuid.NewV7()
	if err != nil {
		// NewV7 only fails when the system random source fails; fall back
		// to a v4, which is still a valid, unique card id.
		return uuid.NewString()
	}
	return id.String()
}

// ValidID reports whether s is a UUID in canonical lower-case form
// (8-4-4-4-12 hexadecimal digits).
func ValidID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// Validate checks every rule a stored card must satisfy, among them that
// every string of the card (content and metadata included) is valid UTF-8.
// The error names the first offending field and wraps ErrInvalid.
func (c *Card) Validate() error {
	if c == nil {
		return fmt.Errorf("%w: card is null", ErrInvalid)
	}
	if !ValidID(c.CardID) {
		return fmt.Errorf("%w: card_id %q is not a canonical lower-case UUID", ErrInvalid, c.CardID)
	}
	if err := ValidateName("project_id", c.ProjectID); err != nil {
		return err
	}
	if c.Type == "" {
		return fmt.Errorf("%w: type is required", ErrInvalid)
	}
	if len(c.Type) > MaxTypeLen || strings.ContainsAny(c.Type, " \t\r\n") {
		return fmt.Errorf("%w: type %q must be at most %d bytes with no white space", ErrInvalid, c.Type, MaxTypeLen)
	}
	if err := checkString("type", c.Type); err != nil {
		return err
	}
	if len(c.AuthorID) > MaxIDLen {
		return fmt.Errorf("%w: author_id is longer than %d bytes", ErrInvalid, MaxIDLen)
	}
	if err := checkString("author_id", c.AuthorID); err != nil {
		return err
	}
	if c.CreatedAt.IsZero() {
		return fmt.Errorf("%w: created_at is required (RFC 3339 time)", ErrInvalid)
	}
	if err := checkIDLen("tool_call_id", c.ToolCallID); err != nil {
		return err
	}
	if err := c.Metadata.validate(); err != nil {
		return err
	}
	if len(c.Content) > 0 && !json.Valid(c.Content) {
		return fmt.Errorf("%w: content is not valid JSON", ErrInvalid)
	}
	if err := CheckUTF8("content", c.Content); err != nil {
		return err
	}
	switch c.Type {
	case TypeToolCall, TypeToolResult:
		if c.ToolCallID == "" {
			return fmt.Errorf("%w: tool_call_id is required on %s cards", ErrInvalid, c.Type)
		}
		if c.Metadata.ToolCallID != "" && c.Metadata.ToolCallID != c.ToolCallID {
			return fmt.Errorf("%w: metadata.tool_call_id %q differs from tool_call_id %q", ErrInvalid, c.Metadata.ToolCallID, c.ToolCallID)
		}
		if c.Metadata.AgentTurnID == "" {
			return fmt.Errorf("%w: metadata.agent_turn_id is required on %s cards", ErrInvalid, c.Type)
		}
		if c.Type == TypeToolCall {
			_, err := c.ToolCall()
			return err
		}
		_, err := c.ToolResult()
		return err
	}
	return nil
}

// ValidateName checks an identifier that appears in NATS subjects
// (project_id, channel_id, agent_id) with the subject token rules of package
// subjects: non-empty, at most 128 bytes, only ASCII letters, digits, '_'
// and '-'. field names the field in the error, which wraps ErrInvalid.
func ValidateName(field, s string) error {
	if err := subjects.ValidateToken(field, s); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

func checkIDLen(field, s string) error {
	if len(s) > MaxIDLen {
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalid, field, MaxIDLen)
	}
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: %s %q must be valid UTF-8 without NUL", ErrInvalid, field, s)
	}
	return nil
}

// Decode parses and validates one card. It never panics on any input; the
// error wraps ErrInvalid and names what is wrong. Invalid UTF-8 anywhere
// in data is refused with the path of its field (CheckUTF8), where
// encoding/json would replace it with U+FFFD.
func Decode(data []byte) (*Card, error) {
	if err := CheckUTF8("", data); err != nil {
		return nil, err
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}
