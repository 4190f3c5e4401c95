package boltstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// checkBoxCards is cardstore's rule for a box operation's ids.
var checkBoxCards = cardstore.CheckBoxCards

// cardsExist checks that every id names a card of the project.
func cardsExist(b *buckets, projectID string, cardIDs []string) error {
	for i, id := range cardIDs {
		if b.cards.Get(cardKey(projectID, id)) == nil {
			return fmt.Errorf("%w: card %s (card_ids[%d]) in project %s", cardstore.ErrNotFound, id, i, projectID)
		}
	}
	return nil
}

// boxSize is a rough payload size of a box request, for the commit budget.
func boxSize(cardIDs []string) int { return 64 + 40*len(cardIDs) }

// CreateBox creates a box of existing cards; see cardstore.Store. An empty
// boxID gets card.NewID(). created_at and updated_at are the store clock.
func (s *Store) CreateBox(ctx context.Context, projectID, boxID string, cardIDs []string) (*card.Box, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := checkProject(projectID); err != nil {
		return nil, err
	}
	if boxID == "" {
		boxID = card.NewID()
	}
	if err := card.ValidateBoxID(boxID); err != nil {
		return nil, fmt.Errorf("%w: %w", cardstore.ErrInvalid, err)
	}
	if err := checkBoxCards(cardIDs); err != nil {
		return nil, err
	}
	ids := append(make([]string, 0, len(cardIDs)), cardIDs...)
	key := join(0, projectID, boxID)
	var out *card.Box
	err := s.write(ctx, boxSize(ids), func(b *buckets) error {
		out = nil
		if b.boxes.Get(key) != nil {
			return fmt.Errorf("%w: box %s already exists in project %s", cardstore.ErrConflict, boxID, projectID)
		}
		if err := cardsExist(b, projectID, ids); err != nil {
			return err
		}
		now := s.cfg.clock().UTC()
		box := &card.Box{BoxID: boxID, ProjectID: projectID, CardIDs: ids, CreatedAt: now, UpdatedAt: now}
		data, err := json.Marshal(box)
		if err != nil {
			return fmt.Errorf("boltstore: encode box %s: %w", boxID, err)
		}
		if err := b.boxes.Put(key, data); err != nil {
			return dirty(fmt.Errorf("boltstore: write box %s: %w", boxID, err))
		}
		out = box
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cloneBox(out), nil
}

// AppendBox appends existing cards to an existing box; see
// cardstore.Store. Appending no cards returns the box unchanged.
func (s *Store) AppendBox(ctx context.Context, projectID, boxID string, cardIDs []string) (*card.Box, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := cardstore.CheckAppendBox(projectID, boxID, cardIDs); err != nil {
		return nil, err
	}
	if len(cardIDs) == 0 {
		return s.GetBox(ctx, projectID, boxID)
	}
	ids := append(make([]string, 0, len(cardIDs)), cardIDs...)
	key := join(0, projectID, boxID)
	var out *card.Box
	err := s.write(ctx, boxSize(ids), func(b *buckets) error {
		out = nil
		data := b.boxes.Get(key)
		if data == nil {
			return fmt.Errorf("%w: box %s in project %s", cardstore.ErrNotFound, boxID, projectID)
		}
		var box card.Box
		if err := json.Unmarshal(data, &box); err != nil {
			return fmt.Errorf("boltstore: stored box %s in project %s is corrupt: %w", boxID, projectID, err)
		}
		if n := len(box.CardIDs) + len(ids); n > cardstore.MaxBoxCards {
			return fmt.Errorf("%w: box %s in project %s holds %d cards; appending %d would make %d, more than %d",
				cardstore.ErrTooLarge, boxID, projectID, len(box.CardIDs), len(ids), n, cardstore.MaxBoxCards)
		}
		if err := cardsExist(b, projectID, ids); err != nil {
			return err
		}
		box.CardIDs = append(box.CardIDs, ids...)
		box.UpdatedAt = s.cfg.clock().UTC()
		newData, err := json.Marshal(&box)
		if err != nil {
			return fmt.Errorf("boltstore: encode box %s: %w", boxID, err)
		}
		if err := b.boxes.Put(key, newData); err != nil {
			return dirty(fmt.Errorf("boltstore: write box %s: %w", boxID, err))
		}
		out = &box
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cloneBox(out), nil
}

// GetBox returns a box of the project, or an error wrapping
// cardstore.ErrNotFound.
func (s *Store) GetBox(ctx context.Context, projectID, boxID string) (*card.Box, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := checkProject(projectID); err != nil {
		return nil, err
	}
	if err := card.ValidateBoxID(boxID); err != nil {
		return nil, fmt.Errorf("%w: %w", cardstore.ErrInvalid, err)
	}
	var box card.Box
	err := s.view(func(b *buckets) error {
		data := b.boxes.Get(join(0, projectID, boxID))
		if data == nil {
			return fmt.Errorf("%w: box %s in project %s", cardstore.ErrNotFound, boxID, projectID)
		}
		if err := json.Unmarshal(data, &box); err != nil {
			return fmt.Errorf("boltstore: stored box %s in project %s is corrupt: %w", boxID, projectID, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if box.CardIDs == nil {
		box.CardIDs = []string{}
	}
	return &box, nil
}

// cloneBox copies a box so the caller owns its card id slice.
func cloneBox(b *card.Box) *card.Box {
	c := *b
	c.CardIDs = append(make([]string, 0, len(b.CardIDs)), b.CardIDs...)
	return &c
}
