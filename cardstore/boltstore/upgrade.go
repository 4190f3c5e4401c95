package boltstore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Upgrades of older files (boltfile.Open runs each in one transaction with
// the version bump, so a crash midway leaves the old file as it was).
//
// Version 1: cards, turns, results, boxes, claims, meta.
// Version 2: version 1 and turninfo, turnlist, agentturns.
// Version 3: version 2 and outbox.
// Version 4: turns, results, turninfo and the claims of calls in one
// bucket, turnrecs, keyed by project and turn (keys.go).

// Buckets of versions 1 to 3 that version 4 has no more.
var (
	bucketV3Turns    = []byte("turns")
	bucketV3Results  = []byte("results")
	bucketV3TurnInfo = []byte("turninfo")
)

// upgradeV3 turns a version 3 file into a version 4 file.
func upgradeV3(tx *bolt.Tx) error { return moveToTurnRecs(tx, schemaVersion3) }

// upgradeV2 turns a version 2 file into a version 4 file: it creates the
// outbox bucket, new and empty, and moves the turn records.
func upgradeV2(tx *bolt.Tx) error {
	if err := createOutbox(tx); err != nil {
		return err
	}
	return moveToTurnRecs(tx, schemaVersion2)
}

// createOutbox creates the outbox bucket of a file from before version 3.
func createOutbox(tx *bolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bucketOutbox); err != nil {
		return fmt.Errorf("create bucket %q: %w", bucketOutbox, err)
	}
	return nil
}

// upgradeV1 turns a version 1 file into a version 4 file: it creates the
// later versions' buckets and moves the turn records, building the turn
// summaries and lists from the turns index on the way (reading every
// indexed card once).
func upgradeV1(tx *bolt.Tx) error {
	for _, name := range [][]byte{bucketCards, bucketV3Turns, bucketV3Results, bucketBoxes, bucketClaims, bucketMeta} {
		if tx.Bucket(name) == nil {
			return fmt.Errorf("%w: schema version %s file lacks bucket %q", ErrSchemaVersion, schemaVersion1, name)
		}
	}
	for _, name := range [][]byte{bucketV3TurnInfo, bucketTurnList, bucketAgentTurns} {
		// A version 1 file has none of them; left-overs of a foreign
		// writer would make the index wrong, so start from scratch.
		if tx.Bucket(name) != nil {
			if err := tx.DeleteBucket(name); err != nil {
				return fmt.Errorf("reset bucket %q: %w", name, err)
			}
		}
	}
	for _, name := range [][]byte{bucketTurnList, bucketAgentTurns} {
		if _, err := tx.CreateBucket(name); err != nil {
			return fmt.Errorf("create bucket %q: %w", name, err)
		}
	}
	if err := createOutbox(tx); err != nil {
		return err
	}
	return moveToTurnRecs(tx, schemaVersion1)
}

// moveToTurnRecs moves the records of the version 3 buckets turns,
// results and turninfo (absent in a version 1 file), and the claims of
// calls from the claims bucket, into a new turnrecs bucket, keeping the
// write sequence, then deletes the old buckets.
func moveToTurnRecs(tx *bolt.Tx, version string) error {
	turns, results, claims := tx.Bucket(bucketV3Turns), tx.Bucket(bucketV3Results), tx.Bucket(bucketClaims)
	info := tx.Bucket(bucketV3TurnInfo)
	for name, b := range map[string]*bolt.Bucket{"turns": turns, "results": results, "claims": claims} {
		if b == nil {
			return fmt.Errorf("%w: schema version %s file lacks bucket %q", ErrSchemaVersion, version, name)
		}
	}
	if info == nil && version != schemaVersion1 {
		return fmt.Errorf("%w: schema version %s file lacks bucket %q", ErrSchemaVersion, version, bucketV3TurnInfo)
	}
	// A left-over of a foreign writer would mix with the moved records.
	if tx.Bucket(bucketTurnRecs) != nil {
		if err := tx.DeleteBucket(bucketTurnRecs); err != nil {
			return fmt.Errorf("reset bucket %q: %w", bucketTurnRecs, err)
		}
	}
	recs, err := tx.CreateBucket(bucketTurnRecs)
	if err != nil {
		return fmt.Errorf("create bucket %q: %w", bucketTurnRecs, err)
	}
	// The records are gathered, sorted by their new keys and written in
	// that order: bbolt splits a transaction's nodes only at its commit,
	// so writing them as the old buckets yield them would insert into the
	// middle of one ever larger node (minutes for a million records).
	var out []kv
	move := func(name []byte, b *bolt.Bucket, parts int, key func(p [][]byte) []byte) error {
		return b.ForEach(func(k, v []byte) error {
			p := bytes.SplitN(k, []byte{sep}, parts)
			if len(p) != parts {
				return fmt.Errorf("%w: %s bucket key %q has no layout", ErrSchemaVersion, name, k)
			}
			nk := key(p)
			if nk == nil {
				return fmt.Errorf("%w: %s bucket key %q has no layout", ErrSchemaVersion, name, k)
			}
			out = append(out, kv{nk, bytes.Clone(v)})
			return nil
		})
	}
	err = move(bucketV3Turns, turns, 3, func(p [][]byte) []byte {
		if len(p[2]) != 8 {
			return nil
		}
		return turnKey(turnPrefix(string(p[0]), string(p[1])), binary.BigEndian.Uint64(p[2]))
	})
	if err != nil {
		return fmt.Errorf("move the turns index: %w", err)
	}
	err = move(bucketV3Results, results, 3, func(p [][]byte) []byte {
		return resultKey(string(p[0]), string(p[1]), string(p[2]))
	})
	if err != nil {
		return fmt.Errorf("move the results index: %w", err)
	}
	if info != nil {
		err = move(bucketV3TurnInfo, info, 2, func(p [][]byte) []byte { return turnInfoKey(string(p[0]), string(p[1])) })
		if err != nil {
			return fmt.Errorf("move the turn summaries: %w", err)
		}
	}
	var moved [][]byte
	err = claims.ForEach(func(k, v []byte) error {
		if inRecs, key := claimSlotOf(k); inRecs {
			moved = append(moved, bytes.Clone(k))
			out = append(out, kv{key, bytes.Clone(v)})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("move the claims of calls: %w", err)
	}
	slices.SortFunc(out, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	if info == nil { // version 1: no summaries yet
		if out, err = withSummaries(tx, out); err != nil {
			return err
		}
	}
	recs.FillPercent = 1 // written in key order: fill each page
	for _, r := range out {
		if err := recs.Put(r.k, r.v); err != nil {
			return fmt.Errorf("write turn record %q: %w", r.k, err)
		}
	}
	if err := recs.SetSequence(turns.Sequence()); err != nil {
		return err
	}
	for _, k := range moved {
		if err := claims.Delete(k); err != nil {
			return err
		}
	}
	for _, name := range [][]byte{bucketV3Turns, bucketV3Results, bucketV3TurnInfo} {
		if tx.Bucket(name) != nil {
			if err := tx.DeleteBucket(name); err != nil {
				return fmt.Errorf("delete bucket %q: %w", name, err)
			}
		}
	}
	return nil
}

// kv is one record an upgrade writes.
type kv struct{ k, v []byte }

// indexedCard is the part of a stored card that buildTurnIndex reads.
type indexedCard struct {
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	Metadata  struct {
		AgentID string `json:"agent_id"`
	} `json:"metadata"`
}

// withSummaries returns recs (a version 1 file's turn records, sorted by
// key) with each turn's summary after its records, where the summary's
// key sorts, and writes the turnlist and agentturns entries: the turn
// index of version 1 had neither. A turn's index entries are in write
// order, so one pass sees every turn's cards first to last.
func withSummaries(tx *bolt.Tx, recs []kv) ([]kv, error) {
	b, err := openBuckets(tx)
	if err != nil {
		return nil, err
	}
	out := make([]kv, 0, len(recs)+len(recs)/8)
	var (
		cur                 *turnRecord
		curProject, curTurn string
		lists               []func() error
	)
	flush := func() error {
		if cur == nil {
			return nil
		}
		data, err := json.Marshal(cur)
		if err != nil {
			return err
		}
		out = append(out, kv{turnInfoKey(curProject, curTurn), data})
		project, turn, rec := curProject, curTurn, cur
		lists = append(lists, func() error {
			if err := b.turnList.Put(turnKey(turnListPrefix(project), rec.FirstSeq), []byte(turn)); err != nil {
				return err
			}
			if rec.AgentID == "" {
				return nil
			}
			return b.agentTurns.Put(turnKey(agentTurnsPrefix(project, rec.AgentID), rec.FirstSeq), []byte(turn))
		})
		cur = nil
		return nil
	}
	for _, r := range recs {
		tr, ok := splitTurnRec(r.k)
		if !ok {
			return nil, fmt.Errorf("boltstore: build turn index: malformed turn record key %q", r.k)
		}
		if cur != nil && (string(tr.project) != curProject || string(tr.turn) != curTurn) {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		out = append(out, r)
		if tr.kind != kindSeq {
			continue
		}
		if cur == nil {
			cur, curProject, curTurn = &turnRecord{}, string(tr.project), string(tr.turn)
		}
		data := b.cards.Get(cardKey(curProject, string(r.v)))
		if data == nil {
			return nil, fmt.Errorf("boltstore: build turn index: turns entry of turn %q in project %s names card %s, which is missing", curTurn, curProject, r.v)
		}
		var ic indexedCard
		if err := json.Unmarshal(data, &ic); err != nil {
			return nil, fmt.Errorf("boltstore: build turn index: card %s of project %s is corrupt: %w", r.v, curProject, err)
		}
		cur.add(binary.BigEndian.Uint64(tr.rest), ic.Type, ic.Metadata.AgentID, ic.CreatedAt.UTC(), len(data))
	}
	if err := flush(); err != nil {
		return nil, err
	}
	for _, put := range lists {
		if err := put(); err != nil {
			return nil, fmt.Errorf("boltstore: build turn lists: %w", err)
		}
	}
	return out, nil
}
