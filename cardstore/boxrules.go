package cardstore

import (
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// The box rules of CreateBox, AppendBox and GetBox, for every store: the
// argument checks, the box a create makes, what an append may add, and
// the errors naming a box.

// CheckCreateBox validates the arguments of CreateBox and returns the box
// id to use: boxID, or a new card.NewID() when it is empty.
func CheckCreateBox(projectID, boxID string, cardIDs []string) (string, error) {
	if err := CheckProject(projectID); err != nil {
		return "", err
	}
	if boxID == "" {
		boxID = card.NewID()
	}
	if err := card.ValidateBoxID(boxID); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return boxID, CheckBoxCards(cardIDs)
}

// CheckGetBox validates the arguments of GetBox.
func CheckGetBox(projectID, boxID string) error {
	if err := CheckProject(projectID); err != nil {
		return err
	}
	if err := card.ValidateBoxID(boxID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// NewBox is the box CreateBox stores: a copy of cardIDs, created and
// updated at the store's time now (UTC).
func NewBox(projectID, boxID string, cardIDs []string, now time.Time) *card.Box {
	now = now.UTC()
	ids := append(make([]string, 0, len(cardIDs)), cardIDs...)
	return &card.Box{BoxID: boxID, ProjectID: projectID, CardIDs: ids, CreatedAt: now, UpdatedAt: now}
}

// AppendToBox appends cardIDs to box, updated at the store's time now,
// unless the box would then hold more than MaxBoxCards (ErrTooLarge).
func AppendToBox(box *card.Box, cardIDs []string, now time.Time) error {
	if n := len(box.CardIDs) + len(cardIDs); n > MaxBoxCards {
		return fmt.Errorf("%w: box %s in project %s holds %d cards; appending %d would make %d, more than %d",
			ErrTooLarge, box.BoxID, box.ProjectID, len(box.CardIDs), len(cardIDs), n, MaxBoxCards)
	}
	box.CardIDs = append(box.CardIDs, cardIDs...)
	box.UpdatedAt = now.UTC()
	return nil
}

// CloneBox copies a box so that the caller owns its card id slice (never
// nil).
func CloneBox(b *card.Box) *card.Box {
	c := *b
	c.CardIDs = append(make([]string, 0, len(b.CardIDs)), b.CardIDs...)
	return &c
}

// BoxNotFound is the ErrNotFound error of a box the project does not have.
func BoxNotFound(projectID, boxID string) error {
	return fmt.Errorf("%w: box %s in project %s", ErrNotFound, boxID, projectID)
}

// BoxExists is the ErrConflict error of CreateBox for a box id in use.
func BoxExists(projectID, boxID string) error {
	return fmt.Errorf("%w: box %s already exists in project %s", ErrConflict, boxID, projectID)
}

// CardMissing is the ErrNotFound error of a box operation naming a card
// (card_ids[i]) the project does not have.
func CardMissing(projectID, cardID string, i int) error {
	return fmt.Errorf("%w: card %s (card_ids[%d]) in project %s", ErrNotFound, cardID, i, projectID)
}
