package boltstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// cardsExist checks that every id names a card of the project.
func cardsExist(b *buckets, projectID string, cardIDs []string) error {
	for i, id := range cardIDs {
		if b.cards.Get(cardKey(projectID, id)) == nil {
			return cardstore.CardMissing(projectID, id, i)
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
	boxID, err := cardstore.CheckCreateBox(projectID, boxID, cardIDs)
	if err != nil {
		return nil, err
	}
	key := join(0, projectID, boxID)
	var out *card.Box
	err = s.write(ctx, boxSize(cardIDs), func(b *buckets) error {
		out = nil
		if b.boxes.Get(key) != nil {
			return cardstore.BoxExists(projectID, boxID)
		}
		if err := cardsExist(b, projectID, cardIDs); err != nil {
			return err
		}
		box := cardstore.NewBox(projectID, boxID, cardIDs, s.cfg.clock())
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
	return cardstore.CloneBox(out), nil
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
			return cardstore.BoxNotFound(projectID, boxID)
		}
		var box card.Box
		if err := json.Unmarshal(data, &box); err != nil {
			return fmt.Errorf("boltstore: stored box %s in project %s is corrupt: %w", boxID, projectID, err)
		}
		if err := cardstore.AppendToBox(&box, ids, s.cfg.clock()); err != nil {
			return err
		}
		if err := cardsExist(b, projectID, ids); err != nil {
			return err
		}
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
	return cardstore.CloneBox(out), nil
}

// GetBox returns a box of the project, or an error wrapping
// cardstore.ErrNotFound.
func (s *Store) GetBox(ctx context.Context, projectID, boxID string) (*card.Box, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	if err := cardstore.CheckGetBox(projectID, boxID); err != nil {
		return nil, err
	}
	var box card.Box
	err := s.view(func(b *buckets) error {
		data := b.boxes.Get(join(0, projectID, boxID))
		if data == nil {
			return cardstore.BoxNotFound(projectID, boxID)
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
