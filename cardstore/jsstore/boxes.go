package jsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// cardsExist checks that every id names a card of the project. Cards are
// immutable, so a card that exists now exists when the box is written.
func (s *Store) cardsExist(ctx context.Context, projectID string, cardIDs []string) error {
	var ids, subjects []string
	first := make(map[string]int)
	for i, id := range cardIDs {
		if _, ok := first[id]; !ok {
			first[id] = i
			ids = append(ids, id)
			subjects = append(subjects, s.lay.card(projectID, id))
		}
	}
	stored, err := s.lastMany(ctx, subjects, true)
	if err != nil {
		return err
	}
	for i, m := range stored {
		if m == nil {
			return cardstore.CardMissing(projectID, ids[i], first[ids[i]])
		}
	}
	return nil
}

// loadBox reads a box: the message (for the compare-and-set) and the box,
// both nil when there is none.
func (s *Store) loadBox(ctx context.Context, projectID, boxID string) (*msg, *card.Box, error) {
	m, err := s.readLast(ctx, s.lay.box(projectID, boxID), true)
	if err != nil || m == nil {
		return nil, nil, err
	}
	var box card.Box
	if err := json.Unmarshal(m.data, &box); err != nil {
		return nil, nil, fmt.Errorf("jsstore: stored box %s in project %s is corrupt: %w", boxID, projectID, err)
	}
	if box.CardIDs == nil {
		box.CardIDs = []string{}
	}
	return m, &box, nil
}

// writeBox stores box as the version after seq (0: a new box).
func (s *Store) writeBox(ctx context.Context, box *card.Box, seq uint64) error {
	data, err := json.Marshal(box)
	if err != nil {
		return fmt.Errorf("jsstore: encode box %s: %w", box.BoxID, err)
	}
	_, err = s.publish(ctx, []*nats.Msg{rollup(expect(record(s.lay.box(box.ProjectID, box.BoxID), data), seq))})
	return err
}

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
	leave, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	if err := s.cardsExist(ctx, projectID, cardIDs); err != nil {
		return nil, err
	}
	box := cardstore.NewBox(projectID, boxID, cardIDs, s.cfg.Clock())
	if err := s.writeBox(ctx, box, 0); err != nil {
		if errors.Is(err, errCAS) {
			return nil, cardstore.BoxExists(projectID, boxID)
		}
		return nil, err
	}
	return cardstore.CloneBox(box), nil
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
	leave, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	var out *card.Box
	err = retryCAS(ctx, func() error {
		m, box, err := s.loadBox(ctx, projectID, boxID)
		if err != nil {
			return err
		}
		if box == nil {
			return cardstore.BoxNotFound(projectID, boxID)
		}
		if len(cardIDs) == 0 {
			out = box
			return nil
		}
		if err := cardstore.AppendToBox(box, cardIDs, s.cfg.Clock()); err != nil {
			return err
		}
		if err := s.cardsExist(ctx, projectID, cardIDs); err != nil {
			return err
		}
		if err := s.writeBox(ctx, box, m.seq); err != nil {
			return err
		}
		out = box
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
	leave, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	_, box, err := s.loadBox(ctx, projectID, boxID)
	if err != nil {
		return nil, err
	}
	if box == nil {
		return nil, cardstore.BoxNotFound(projectID, boxID)
	}
	return box, nil
}
