package card

import (
	"fmt"
	"time"
)

// Box is an ordered, appendable list of card ids within one project: a
// context (context_box_id) or an output (output_box_id).
type Box struct {
	// BoxID identifies the box within its project.
	BoxID string `json:"box_id"`
	// ProjectID is the project the box and its cards belong to.
	ProjectID string `json:"project_id"`
	// CardIDs are the cards, in append order. A card may appear more than once.
	CardIDs []string `json:"card_ids"`
	// CreatedAt is when the box was created (store time).
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when cards were last appended (store time).
	UpdatedAt time.Time `json:"updated_at"`
}

// ValidateBoxID checks a box id: non-empty, at most MaxIDLen bytes, printable
// ASCII with no white space.
func ValidateBoxID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: box_id is required", ErrInvalid)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: box_id is longer than %d bytes", ErrInvalid, MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return fmt.Errorf("%w: box_id has invalid character %q at byte %d", ErrInvalid, id[i], i)
		}
	}
	return nil
}
