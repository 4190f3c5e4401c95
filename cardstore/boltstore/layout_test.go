package boltstore_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// The test's own reading of the file layout (package documentation, "File
// layout"), independent of the package's key code.

// layoutRec is a turnrecs key taken apart.
type layoutRec struct {
	project, turn string
	kind          byte   // 'c', 's' or 't'
	call          string // kind 'c'
	callKind      byte   // kind 'c': 'k' (claim) or 'r' (result)
	seq           uint64 // kind 's'
}

// head is project 0x00 turn: the turn's identity.
func (r layoutRec) head() string { return r.project + "\x00" + r.turn }

// parseRec takes a turnrecs key apart or says why it cannot.
func parseRec(k []byte) (layoutRec, error) {
	parts := bytes.SplitN(k, []byte{0}, 3)
	if len(parts) != 3 || len(parts[2]) == 0 {
		return layoutRec{}, fmt.Errorf("turnrecs key %q: not project 0x00 turn 0x00 kind…", k)
	}
	r := layoutRec{project: string(parts[0]), turn: string(parts[1]), kind: parts[2][0]}
	rest := parts[2][1:]
	switch r.kind {
	case 's':
		if len(rest) != 8 {
			return r, fmt.Errorf("turnrecs key %q: index entry without an 8-byte sequence", k)
		}
		r.seq = binary.BigEndian.Uint64(rest)
	case 't':
		if len(rest) != 0 {
			return r, fmt.Errorf("turnrecs key %q: summary key with a tail", k)
		}
	case 'c':
		call, kind, ok := bytes.Cut(rest, []byte{0})
		if !ok || len(call) == 0 || len(kind) != 1 || (kind[0] != 'k' && kind[0] != 'r') {
			return r, fmt.Errorf("turnrecs key %q: not a call record", k)
		}
		r.call, r.callKind = string(call), kind[0]
	default:
		return r, fmt.Errorf("turnrecs key %q: unknown kind %q", k, r.kind)
	}
	return r, nil
}

// storedTurn is a turn summary as the test reads it.
type storedTurn struct {
	FirstSeq    uint64    `json:"first_seq"`
	AgentID     string    `json:"agent_id"`
	FirstAt     time.Time `json:"first_at"`
	LastAt      time.Time `json:"last_at"`
	Cards       int       `json:"cards"`
	ToolCalls   int       `json:"tool_calls"`
	ToolResults int       `json:"tool_results"`
}

// checkLayout checks every record of a schema version 4 file: each
// turnrecs key has the layout's form; index and result entries name
// stored cards; claims decode, and the claims bucket holds no claim of a
// call; no outbox entry belongs to a call with a result; the turn
// summaries and the turn lists are what the cards say.
func checkLayout(tx *bolt.Tx) error {
	for _, gone := range []string{"turns", "results", "turninfo"} {
		if tx.Bucket([]byte(gone)) != nil {
			return fmt.Errorf("bucket %q of schema version 3 is still in the file", gone)
		}
	}
	cards, recs := tx.Bucket([]byte("cards")), tx.Bucket([]byte("turnrecs"))
	want := map[string]*storedTurn{} // head -> recomputed summary
	infos := map[string][]byte{}     // head -> stored summary
	results := map[string]bool{}     // project 0x00 turn 0x00 call
	err := recs.ForEach(func(k, v []byte) error {
		r, err := parseRec(k)
		if err != nil {
			return err
		}
		switch {
		case r.kind == 't':
			infos[r.head()] = bytes.Clone(v)
		case r.kind == 'c' && r.callKind == 'k':
			var rec cardstore.ClaimRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("claim %q: %w", k, err)
			}
		default: // an index or result entry: names a stored card
			data := cards.Get([]byte(r.project + "\x00" + string(v)))
			if data == nil {
				return fmt.Errorf("turnrecs entry %q names missing card %s", k, v)
			}
			if r.kind == 'c' {
				results[r.head()+"\x00"+r.call] = true
				return nil
			}
			var c card.Card
			if err := json.Unmarshal(data, &c); err != nil {
				return fmt.Errorf("card %s: %w", v, err)
			}
			st := want[r.head()]
			if st == nil {
				st = &storedTurn{FirstSeq: r.seq, FirstAt: c.CreatedAt}
				want[r.head()] = st
			}
			st.Cards++
			st.LastAt = c.CreatedAt
			switch c.Type {
			case card.TypeToolCall:
				st.ToolCalls++
			case card.TypeToolResult:
				st.ToolResults++
			}
			if st.AgentID == "" {
				st.AgentID = c.Metadata.AgentID
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = tx.Bucket([]byte("claims")).ForEach(func(k, _ []byte) error {
		_, key, _ := bytes.Cut(k, []byte{0})
		if _, ok := cardstore.ParseCallKey(string(key)); ok {
			return fmt.Errorf("the claims bucket holds %q, the claim of a call", k)
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = tx.Bucket([]byte("outbox")).ForEach(func(k, _ []byte) error {
		if results[string(k)] {
			return fmt.Errorf("outbox entry %q belongs to a call with a result", k)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return checkTurnSummaries(tx, want, infos)
}

// checkTurnSummaries checks the stored summaries against the ones
// recomputed from the cards, and the turnlist and agentturns entries
// against the summaries.
func checkTurnSummaries(tx *bolt.Tx, want map[string]*storedTurn, infos map[string][]byte) error {
	if len(infos) != len(want) {
		return fmt.Errorf("turnrecs has %d turn summaries, the turn index has %d turns", len(infos), len(want))
	}
	wantList, wantAgents := map[string]string{}, map[string]string{}
	for head, w := range want {
		data := infos[head]
		var got storedTurn
		if err := json.Unmarshal(data, &got); err != nil {
			return fmt.Errorf("summary of turn %q: %w", head, err)
		}
		if err := boltstore.TurnMemoAgrees([]byte(head+"\x00t"), data); err != nil {
			return err
		}
		if !got.FirstAt.Equal(w.FirstAt) || !got.LastAt.Equal(w.LastAt) || got.FirstSeq != w.FirstSeq ||
			got.AgentID != w.AgentID || got.Cards != w.Cards || got.ToolCalls != w.ToolCalls || got.ToolResults != w.ToolResults {
			return fmt.Errorf("summary of turn %q = %+v, recomputed from the cards %+v", head, got, *w)
		}
		project, turn, _ := strings.Cut(head, "\x00")
		seq := binary.BigEndian.AppendUint64(nil, w.FirstSeq)
		wantList[project+"\x00"+string(seq)] = turn
		if w.AgentID != "" {
			wantAgents[project+"\x00"+w.AgentID+"\x00"+string(seq)] = turn
		}
	}
	for name, want := range map[string]map[string]string{"turnlist": wantList, "agentturns": wantAgents} {
		n := 0
		err := tx.Bucket([]byte(name)).ForEach(func(k, v []byte) error {
			n++
			if w, ok := want[string(k)]; !ok || w != string(v) {
				return fmt.Errorf("%s entry %q -> %q, want %q", name, k, v, w)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if n != len(want) {
			return fmt.Errorf("%s has %d entries, want %d", name, n, len(want))
		}
	}
	return nil
}

// toV3 rewrites a closed schema version 4 file at path in the version 3
// layout (turns, results, turninfo, and the claims of calls in claims),
// as a build of version 3 wrote it.
func toV3(t testing.TB, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		recs, claims := tx.Bucket([]byte("turnrecs")), tx.Bucket([]byte("claims"))
		var bs [3]*bolt.Bucket
		for i, name := range []string{"turns", "results", "turninfo"} {
			if bs[i], err = tx.CreateBucket([]byte(name)); err != nil {
				return err
			}
		}
		turns, results, info := bs[0], bs[1], bs[2]
		if err := turns.SetSequence(recs.Sequence()); err != nil {
			return err
		}
		err := recs.ForEach(func(k, v []byte) error {
			r, err := parseRec(k)
			if err != nil {
				return err
			}
			v = bytes.Clone(v)
			switch {
			case r.kind == 's':
				return turns.Put(binary.BigEndian.AppendUint64([]byte(r.head()+"\x00"), r.seq), v)
			case r.kind == 't':
				return info.Put([]byte(r.head()), v)
			case r.callKind == 'r':
				return results.Put([]byte(r.head()+"\x00"+r.call), v)
			default:
				key := cardstore.CallKey{AgentTurnID: r.turn, ToolCallID: r.call}.String()
				return claims.Put([]byte(r.project+"\x00"+key), v)
			}
		})
		if err != nil {
			return err
		}
		if err := tx.DeleteBucket([]byte("turnrecs")); err != nil {
			return err
		}
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), []byte("3"))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("rewrite %s in schema version 3: %v", path, err)
	}
}

// snapshot returns every bucket's records of the closed file at path but
// the meta bucket's (which every Open writes), and each bucket's
// sequence.
func snapshot(t *testing.T, path string) map[string]string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]string{}
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if string(name) == "meta" {
				return nil
			}
			out[string(name)+" sequence"] = fmt.Sprint(b.Sequence())
			return b.ForEach(func(k, v []byte) error {
				out[string(name)+" "+string(k)] = string(v)
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestUpgradeFromVersion3 fills a store with every kind of record (turns
// of two projects, results, written claims of calls and their tombstones,
// a service lease, an outbox entry, a box), rewrites the file in the
// version 3 layout and opens it: the upgrade must give back exactly the
// records the store wrote, and the store must go on from them.
func TestUpgradeFromVersion3(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "cards.db")
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	fill(ctx, t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkFile(t, path)
	before := snapshot(t, path)
	toV3(t, path)
	if got := snapshot(t, path); maps.Equal(got, before) {
		t.Fatal("the version 3 rewrite changed nothing: the test tests nothing")
	}

	var logged bytes.Buffer
	s, err = boltstore.Open(path, boltstore.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	if err != nil {
		t.Fatalf("open a version 3 file: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"upgrading the data file's layout", "from_schema=3", "data file upgraded"} {
		if !strings.Contains(logged.String(), line) {
			t.Errorf("the upgrade's log lacks %q:\n%s", line, logged.String())
		}
	}
	checkFile(t, path)
	upgraded := snapshot(t, path)
	for _, k := range slices.Sorted(maps.Keys(before)) {
		if upgraded[k] != before[k] {
			t.Errorf("after the upgrade %q = %q, want %q", k, upgraded[k], before[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(upgraded)) {
		if _, ok := before[k]; !ok {
			t.Errorf("after the upgrade %q = %q, not in the file before", k, upgraded[k])
		}
	}

	// The store goes on: the held claim is still held, the result of a
	// call is found, and the sequence goes on from the file's.
	s, err = boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.FindToolResult(ctx, "p", "t-1", "c1"); err != nil {
		t.Errorf("result after the upgrade: %v", err)
	}
	if c, err := s.GetClaim(ctx, "p", cardstore.CallKey{AgentTurnID: "t/2", ToolCallID: "c2"}.String()); err != nil || c.Holder != "w-long" {
		t.Errorf("the written claim after the upgrade = %+v, %v; want w-long's", c, err)
	}
	after := storetest.NoteCard("p", "t-1", "after")
	if err := s.Put(ctx, after); err != nil {
		t.Fatal(err)
	}
	page, err := s.ListTurn(ctx, cardstore.ListTurnRequest{ProjectID: "p", AgentTurnID: "t-1"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(page.Cards); n != 4 || page.Cards[n-1].CardID != after.CardID {
		t.Errorf("turn t-1 after a put following the upgrade has %d cards; want 4, the new note last", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkFile(t, path)
}

// fill writes one of every kind of record to s.
func fill(ctx context.Context, t *testing.T, s *boltstore.Store) {
	t.Helper()
	put := func(cards ...*card.Card) {
		t.Helper()
		if err := s.Put(ctx, cards...); err != nil {
			t.Fatal(err)
		}
	}
	put(storetest.ToolCallCard("p", "t-1", "c1"), storetest.ToolResultCard("p", "t-1", "c1", card.StatusSuccess))
	put(storetest.ToolCallCard("p", "t/2", "c2"), storetest.ToolCallCard("p", "t/2", "c3"))
	put(storetest.NoteCard("q", "t-1", "other project"))
	put(storetest.NoteCard("p", "", "no turn"))
	claim := func(key, holder string, lease time.Duration) {
		t.Helper()
		if _, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: key, Holder: holder, Lease: lease}); err != nil {
			t.Fatal(err)
		}
	}
	claim(cardstore.CallKey{AgentTurnID: "t/2", ToolCallID: "c2"}.String(), "w-long", time.Hour) // written at once
	claim(cardstore.CallKey{AgentTurnID: "t/2", ToolCallID: "c3"}.String(), "w-mem", time.Second)
	put(storetest.ToolResultCard("p", "t/2", "c3", card.StatusFailed)) // a tombstone
	claim("service/lease", "svc", time.Hour)
	outboxCall := storetest.ToolCallCard("p", "t-3", "c4")
	if err := s.PutWithCommand(ctx, outboxCall, boltstore.Message{Subject: "cmd.x", Data: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	note := storetest.NoteCard("p", "t-1", "boxed")
	put(note)
	if _, err := s.CreateBox(ctx, "p", "b", []string{note.CardID}); err != nil {
		t.Fatal(err)
	}
}

// claimRecordOf reads the stored claim of key in project p, where the
// layout keeps it: a call's among its turn's records, any other in the
// claims bucket.
func claimRecordOf(tx *bolt.Tx, p, key string) []byte {
	if ck, ok := cardstore.ParseCallKey(key); ok {
		return tx.Bucket([]byte("turnrecs")).Get([]byte(p + "\x00" + ck.AgentTurnID + "\x00c" + ck.ToolCallID + "\x00k"))
	}
	return tx.Bucket([]byte("claims")).Get([]byte(p + "\x00" + key))
}

// BenchmarkUpgradeFromVersion3 times Open's upgrade of a version 3 file of
// calls calls (a tool.call and a tool.result card each, 100 calls a turn)
// to version 4, and reports the heap the upgrade's transaction took;
// operations.md's upgrade note quotes it.
//
//	go test -run '^$' -bench UpgradeFromVersion3 -benchtime 1x ./cardstore/boltstore
func BenchmarkUpgradeFromVersion3(b *testing.B) {
	const calls = 50_000
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "cards.db")
	s, err := boltstore.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	var batch []*card.Card
	for i := range calls {
		turn, call := fmt.Sprintf("turn-%d", i/100), fmt.Sprintf("call-%d", i)
		batch = append(batch, storetest.ToolCallCard("p", turn, call), storetest.ToolResultCard("p", turn, call, card.StatusSuccess))
		if len(batch) == 1000 {
			if err := s.Put(ctx, batch...); err != nil {
				b.Fatal(err)
			}
			batch = nil
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		toV3(b, path)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		s, err := boltstore.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), "MiB-allocated")
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
