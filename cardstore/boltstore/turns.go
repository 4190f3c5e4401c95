package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/internal/decodememo"
)

// turnRecord is a turn's summary as stored in the turnrecs bucket (turnInfoKey). Put
// keeps it up to date in the transaction that writes the turn's cards.
type turnRecord struct {
	// FirstSeq is the write sequence of the turn's first card: the key of
	// its turnlist (and agentturns) entry.
	FirstSeq uint64 `json:"first_seq"`
	cardstore.TurnSummary
}

// add counts one more card of the turn, written with sequence seq. It
// reports whether the turn's AgentID was set by this card (so that the
// agentturns entry must be written).
func (r *turnRecord) add(seq uint64, typ, agentID string, createdAt time.Time, size int) (agentSet bool) {
	if r.Cards == 0 {
		r.FirstSeq = seq
	}
	return r.Add(typ, agentID, createdAt, size)
}

// turnListPrefix is project+0x00: every turnlist entry of the project
// starts with it and ends with the 8-byte FirstSeq.
func turnListPrefix(projectID string) []byte { return append([]byte(projectID), sep) }

// agentTurnsPrefix is project+0x00+agent+0x00: every agentturns entry of
// the agent's turns starts with it and ends with the 8-byte FirstSeq.
func agentTurnsPrefix(projectID, agentID string) []byte {
	return append(join(9, projectID, agentID), sep)
}

// turnRecords remembers the turn records written last as decoded
// (decodememo): every Put of a turn's cards reads its record back. A
// turnRecord holds values only, so the memo's copies are independent.
var turnRecords = decodememo.New[turnRecord](4096)

// loadTurnRecord reads the record of a turn, or returns nil.
func loadTurnRecord(b *buckets, key []byte) (*turnRecord, error) {
	data := b.recs.Get(key)
	if data == nil {
		return nil, nil
	}
	if r, ok := turnRecords.Get(key, data); ok {
		return &r, nil
	}
	var r turnRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("boltstore: stored turn record %q is corrupt: %w", key, err)
	}
	return &r, nil
}

// turnUpdate is the pending change of one turn's record within a Put.
type turnUpdate struct {
	project, turn string
	key           []byte
	rec           turnRecord
	newTurn       bool // the turn had no record before this Put
	agentSet      bool // this Put set rec.AgentID
}

// turnUpdates gathers the record changes of one Put, one per turn, so that
// a Put of many cards of one turn reads and writes its record once.
type turnUpdates struct {
	byKey map[string]*turnUpdate
	order []*turnUpdate
}

// load reads the current records of every turn the Put writes to. It runs
// in the check phase of applyPut, before anything is written.
func (u *turnUpdates) load(b *buckets, pcs []putCard, skip []bool) error {
	u.byKey, u.order = nil, nil
	for i := range pcs {
		pc := &pcs[i]
		if skip[i] || pc.turnPrefix == nil {
			continue
		}
		key := turnInfoKey(pc.ProjectID, pc.Turn)
		if u.byKey[string(key)] != nil {
			continue
		}
		rec, err := loadTurnRecord(b, key)
		if err != nil {
			return err
		}
		tu := &turnUpdate{project: pc.ProjectID, turn: pc.Turn, key: key, newTurn: rec == nil}
		if rec != nil {
			tu.rec = *rec
		}
		if u.byKey == nil {
			u.byKey = make(map[string]*turnUpdate)
		}
		u.byKey[string(key)] = tu
		u.order = append(u.order, tu)
	}
	return nil
}

// add counts a card written with sequence seq.
func (u *turnUpdates) add(pc *putCard, seq uint64) {
	tu := u.byKey[string(turnInfoKey(pc.ProjectID, pc.Turn))]
	if tu.rec.add(seq, pc.Type, pc.AgentID, pc.CreatedAt, len(pc.Data)) {
		tu.agentSet = true
	}
}

// write stores the changed records and the list entries of new turns and
// newly known agents. Its errors happen after writing began.
func (u *turnUpdates) write(b *buckets) error {
	for _, tu := range u.order {
		if err := writeTurnRecord(b, tu.project, tu.turn, tu.key, &tu.rec, tu.newTurn, tu.agentSet); err != nil {
			return dirty(err)
		}
	}
	return nil
}

// writeTurnRecord stores one turn record and its list entries.
func writeTurnRecord(b *buckets, project, turn string, key []byte, rec *turnRecord, newTurn, agentSet bool) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("boltstore: encode record of turn %q in project %s: %w", turn, project, err)
	}
	if err := b.recs.Put(key, data); err != nil {
		return fmt.Errorf("boltstore: write record of turn %q in project %s: %w", turn, project, err)
	}
	turnRecords.Put(key, data, *rec)
	if newTurn {
		if err := b.turnList.Put(turnKey(turnListPrefix(project), rec.FirstSeq), []byte(turn)); err != nil {
			return fmt.Errorf("boltstore: list turn %q in project %s: %w", turn, project, err)
		}
	}
	if agentSet {
		if err := b.agentTurns.Put(turnKey(agentTurnsPrefix(project, rec.AgentID), rec.FirstSeq), []byte(turn)); err != nil {
			return fmt.Errorf("boltstore: list turn %q of agent %q in project %s: %w", turn, rec.AgentID, project, err)
		}
	}
	return nil
}

// ListTurns returns one page of the project's turns, newest first by the
// write sequence of each turn's first card. Limit 0 or above
// cardstore.MaxPage means MaxPage; a negative Limit, or an AgentID longer
// than card.MaxIDLen bytes, not valid UTF-8 or holding a NUL, is
// ErrInvalid. Next is the FirstSeq of the page's last turn when older
// turns follow, else 0.
func (s *Store) ListTurns(ctx context.Context, req cardstore.ListTurnsRequest) (*cardstore.ListTurnsResult, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, err
	}
	limit, err := cardstore.CheckListTurns(req)
	if err != nil {
		return nil, err
	}
	prefix := turnListPrefix(req.ProjectID)
	if req.AgentID != "" {
		prefix = agentTurnsPrefix(req.ProjectID, req.AgentID)
	}
	before := req.Before
	if before == 0 {
		before = math.MaxUint64
	}
	res := &cardstore.ListTurnsResult{Turns: []cardstore.TurnInfo{}}
	var turns []string
	var raw [][]byte
	err = s.view(func(b *buckets) error {
		list := b.turnList
		if req.AgentID != "" {
			list = b.agentTurns
		}
		cur := list.Cursor()
		bound := turnKey(prefix, before) // exclusive
		k, v := cur.Seek(bound)
		if k == nil {
			k, v = cur.Last()
		}
		for k != nil && bytes.Compare(k, bound) >= 0 {
			k, v = cur.Prev()
		}
		var last uint64
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = cur.Prev() {
			if len(k) != len(prefix)+8 {
				continue // cannot happen: project, agent and turn ids hold no NUL
			}
			if len(raw) == limit {
				res.Next = last // older turns follow
				return nil
			}
			turn := string(v)
			data := b.recs.Get(turnInfoKey(req.ProjectID, turn))
			if data == nil {
				return fmt.Errorf("boltstore: turn list of project %s names turn %q, which has no record", req.ProjectID, turn)
			}
			turns = append(turns, turn)
			raw = append(raw, bytes.Clone(data)) // data lives only as long as the tx
			last = binary.BigEndian.Uint64(k[len(prefix):])
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, data := range raw {
		var r turnRecord
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("boltstore: stored record of turn %q in project %s is corrupt: %w", turns[i], req.ProjectID, err)
		}
		res.Turns = append(res.Turns, r.Info(turns[i]))
	}
	return res, nil
}
