package boltstore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
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
// later versions' buckets, moves the turn records, and builds the turn
// summaries and lists from the turns index, reading every indexed card
// once.
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
	if err := moveToTurnRecs(tx, schemaVersion1); err != nil {
		return err
	}
	return buildTurnIndex(tx)
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
	move := func(name []byte, b *bolt.Bucket, parts int, key func(p [][]byte) []byte) error {
		return b.ForEach(func(k, v []byte) error {
			p := bytes.SplitN(k, []byte{sep}, parts)
			if len(p) != parts {
				return fmt.Errorf("%w: %s bucket key %q has no layout", ErrSchemaVersion, name, k)
			}
			return recs.Put(key(p), bytes.Clone(v))
		})
	}
	err = move(bucketV3Turns, turns, 3, func(p [][]byte) []byte {
		if len(p[2]) != 8 {
			return nil // bbolt refuses the empty key: the upgrade fails
		}
		return turnKey(turnPrefix(string(p[0]), string(p[1])), binary.BigEndian.Uint64(p[2]))
	})
	if err != nil {
		return fmt.Errorf("move the turns index: %w", err)
	}
	if err := recs.SetSequence(turns.Sequence()); err != nil {
		return err
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
		if slot, key := claimSlot(recs, claims, k); slot == recs {
			moved = append(moved, bytes.Clone(k))
			return recs.Put(key, bytes.Clone(v))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("move the claims of calls: %w", err)
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

// indexedCard is the part of a stored card that buildTurnIndex reads.
type indexedCard struct {
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	Metadata  struct {
		AgentID string `json:"agent_id"`
	} `json:"metadata"`
}

// buildTurnIndex writes the turn summaries and the turnlist and agentturns
// entries from the turns index, for a file written before they existed
// (schema version 1). The index holds each turn's entries together, in
// write order, so one pass sees every turn's cards first to last.
func buildTurnIndex(tx *bolt.Tx) error {
	b, err := openBuckets(tx)
	if err != nil {
		return err
	}
	type built struct {
		project, turn string
		rec           *turnRecord
	}
	var all []*built
	var cur *built
	// Writing to the bucket under a cursor moves it: read the whole
	// index first, then write.
	c := b.recs.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		r, ok := splitTurnRec(k)
		if !ok {
			return fmt.Errorf("boltstore: build turn index: malformed turnrecs key %q", k)
		}
		if r.kind != kindSeq {
			continue
		}
		if cur == nil || string(r.project) != cur.project || string(r.turn) != cur.turn {
			cur = &built{project: string(r.project), turn: string(r.turn), rec: &turnRecord{}}
			all = append(all, cur)
		}
		data := b.cards.Get(cardKey(cur.project, string(v)))
		if data == nil {
			return fmt.Errorf("boltstore: build turn index: turns entry of turn %q in project %s names card %s, which is missing", cur.turn, cur.project, v)
		}
		var ic indexedCard
		if err := json.Unmarshal(data, &ic); err != nil {
			return fmt.Errorf("boltstore: build turn index: card %s of project %s is corrupt: %w", v, cur.project, err)
		}
		cur.rec.add(binary.BigEndian.Uint64(r.rest), ic.Type, ic.Metadata.AgentID, ic.CreatedAt.UTC(), len(data))
	}
	for _, t := range all {
		if err := writeTurnRecord(b, t.project, t.turn, turnInfoKey(t.project, t.turn), t.rec, true, t.rec.AgentID != ""); err != nil {
			return err
		}
	}
	return nil
}
