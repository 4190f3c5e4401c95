package boltstore_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/pkg/card"
)

// checkFile opens a closed store file read-only and fails t on any bbolt
// consistency error (as `bbolt check` does) or any record that breaks the
// layout of the package documentation (layout_test.go).
func checkFile(t testing.TB, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true, Timeout: time.Second})
	if err != nil {
		t.Errorf("consistency check: open %s: %v", path, err)
		return
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		n := 0
		for err := range tx.Check() {
			t.Errorf("consistency check of %s: %v", path, err)
			n++
		}
		if n > 0 {
			return fmt.Errorf("%d bbolt errors", n)
		}
		return checkLayout(tx)
	})
	if err != nil {
		t.Errorf("consistency check of %s: %v", path, err)
	}
}

// openStore opens a store in a new temp dir; cleanup closes it and checks
// the file.
func openStore(t testing.TB, opts ...boltstore.Option) (*boltstore.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cards.db")
	s, err := boltstore.Open(path, opts...)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		checkFile(t, path)
	})
	return s, path
}

func TestConformance(t *testing.T) {
	for _, gc := range []bool{true, false} {
		t.Run(fmt.Sprintf("group-commit=%v", map[bool]string{true: "on", false: "off"}[gc]), func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T) cardstore.Store {
				s, _ := openStore(t, boltstore.WithGroupCommit(gc))
				return s
			})
		})
	}
}

func TestReopenKeepsData(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "cards.db")
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	call := storetest.ToolCallCard("p", "turn-1", "call-1")
	res := storetest.ToolResultCard("p", "turn-1", "call-1", card.StatusSuccess)
	if err := s.Put(ctx, call, res); err != nil {
		t.Fatal(err)
	}
	box, err := s.CreateBox(ctx, "p", "", []string{call.CardID, res.CardID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: "k", Holder: "w1", Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkFile(t, path)

	s, err = boltstore.Open(path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	all, err := cardstore.AllTurn(ctx, s, "p", "turn-1")
	if err != nil || len(all) != 2 || all[0].CardID != call.CardID || all[1].CardID != res.CardID {
		t.Fatalf("turn after reopen = %v, %v; want call then result", all, err)
	}
	if got, err := s.FindToolResult(ctx, "p", "turn-1", "call-1"); err != nil || got.CardID != res.CardID {
		t.Fatalf("result after reopen = %v, %v", got, err)
	}
	if got, err := s.GetBox(ctx, "p", box.BoxID); err != nil || len(got.CardIDs) != 2 {
		t.Fatalf("box after reopen = %v, %v", got, err)
	}
	_, err = s.Claim(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: "k", Holder: "w2", Lease: time.Minute})
	if !errors.Is(err, cardstore.ErrClaimHeld) {
		t.Fatalf("claim after reopen: got %v, want ErrClaimHeld", err)
	}
	// New writes continue the write sequence after the old ones.
	note := storetest.NoteCard("p", "turn-1", "after reopen")
	if err := s.Put(ctx, note); err != nil {
		t.Fatal(err)
	}
	all, err = cardstore.AllTurn(ctx, s, "p", "turn-1")
	if err != nil || len(all) != 3 || all[2].CardID != note.CardID {
		t.Fatalf("turn after a write following reopen = %v, %v", all, err)
	}
}

func TestSchemaVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cards.db")
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), []byte("5"))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, err = boltstore.Open(path)
	if !errors.Is(err, boltstore.ErrSchemaVersion) || !strings.Contains(err.Error(), `"5"`) {
		t.Fatalf("open of a version 5 file: got %v, want ErrSchemaVersion naming the version", err)
	}

	// A bbolt file of some other program.
	other := filepath.Join(t.TempDir(), "other.db")
	db, err = bolt.Open(other, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("widgets"))
		return err
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, err = boltstore.Open(other)
	if !errors.Is(err, boltstore.ErrSchemaVersion) {
		t.Fatalf("open of a foreign bbolt file: got %v, want ErrSchemaVersion", err)
	}
}

func TestLockedFile(t *testing.T) {
	s, path := openStore(t)
	_ = s
	_, err := boltstore.Open(path, boltstore.WithOpenTimeout(100*time.Millisecond))
	if !errors.Is(err, boltstore.ErrLocked) || !strings.Contains(err.Error(), "data file is locked by another process") {
		t.Fatalf("second open: got %v, want ErrLocked", err)
	}
}

func TestOptionValidation(t *testing.T) {
	tests := []struct {
		name string
		opt  boltstore.Option
	}{
		{"max card bytes zero", boltstore.WithMaxCardBytes(0)},
		{"max card bytes negative", boltstore.WithMaxCardBytes(-1)},
		{"max card bytes above the default", boltstore.WithMaxCardBytes(cardstore.DefaultMaxCardBytes + 1)},
		{"nil clock", boltstore.WithClock(nil)},
		{"nil logger", boltstore.WithLogger(nil)},
		{"zero open timeout", boltstore.WithOpenTimeout(0)},
		{"nil commit observer", boltstore.WithCommitObserver(nil)},
		{"nil option", nil},
	}
	for _, tc := range tests {
		path := filepath.Join(t.TempDir(), "cards.db")
		s, err := boltstore.Open(path, tc.opt)
		if err == nil {
			s.Close()
			t.Errorf("%s: open succeeded", tc.name)
			continue
		}
		if !errors.Is(err, cardstore.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", tc.name, err)
		}
		if _, statErr := os.Stat(path); !errors.Is(statErr, fs.ErrNotExist) {
			t.Errorf("%s: a failed open created the file (stat: %v)", tc.name, statErr)
		}
	}
	if _, err := boltstore.Open(""); !errors.Is(err, cardstore.ErrInvalid) {
		t.Errorf("open of an empty path: got %v, want ErrInvalid", err)
	}
}

func TestMaxCardBytes(t *testing.T) {
	s, _ := openStore(t, boltstore.WithMaxCardBytes(600))
	ok := storetest.NoteCard("p", "t", "short")
	big := storetest.NoteCard("p", "t", strings.Repeat("y", 600))
	if err := s.Put(t.Context(), ok); err != nil {
		t.Fatal(err)
	}
	err := s.Put(t.Context(), big)
	if !errors.Is(err, cardstore.ErrTooLarge) || !strings.Contains(err.Error(), big.CardID) || !strings.Contains(err.Error(), "600") {
		t.Fatalf("put above a lowered limit: got %v, want ErrTooLarge naming the card and the limit", err)
	}
}

// fakeClock is a clock moved by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestClock(t *testing.T) {
	ctx := t.Context()
	clk := &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)}
	s, _ := openStore(t, boltstore.WithClock(clk.Now))
	req := cardstore.ClaimRequest{ProjectID: "p", Key: "k", Holder: "w1", Lease: time.Minute}
	c, err := s.Claim(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if want := clk.Now().Add(time.Minute); !c.ExpiresAt.Equal(want) {
		t.Fatalf("expires at %v, want %v", c.ExpiresAt, want)
	}
	clk.Advance(time.Minute - time.Nanosecond)
	req.Holder = "w2"
	_, err = s.Claim(ctx, req)
	var held *cardstore.ClaimHeldError
	if !errors.As(err, &held) || held.Holder != "w1" || !held.ExpiresAt.Equal(c.ExpiresAt) {
		t.Fatalf("claim 1ns before expiry: got %v", err)
	}
	clk.Advance(time.Nanosecond)
	c2, err := s.Claim(ctx, req)
	if err != nil {
		t.Fatalf("claim at expiry: %v", err)
	}
	if !c2.TakenOver || c2.Token != 2 || c2.PreviousHolder != "w1" {
		t.Fatalf("take-over = %+v", c2)
	}
	// GetClaim judges expiry by the same clock, at the time of the read.
	clk.Advance(time.Minute - time.Nanosecond)
	if g, err := s.GetClaim(ctx, "p", "k"); err != nil || g.Expired || g.Holder != "w2" || !g.ExpiresAt.Equal(c2.ExpiresAt) {
		t.Fatalf("get claim 1ns before expiry = %+v, %v; want w2's live claim", g, err)
	}
	clk.Advance(time.Nanosecond)
	if g, err := s.GetClaim(ctx, "p", "k"); err != nil || !g.Expired || g.Holder != "w2" {
		t.Fatalf("get claim at expiry = %+v, %v; want w2's claim, expired", g, err)
	}

	n := storetest.NoteCard("p", "", "x")
	if err := s.Put(ctx, n); err != nil {
		t.Fatal(err)
	}
	box, err := s.CreateBox(ctx, "p", "b", []string{n.CardID})
	if err != nil {
		t.Fatal(err)
	}
	created := clk.Now()
	clk.Advance(time.Hour)
	box2, err := s.AppendBox(ctx, "p", "b", []string{n.CardID})
	if err != nil {
		t.Fatal(err)
	}
	if !box.CreatedAt.Equal(created) || !box.UpdatedAt.Equal(created) || !box2.CreatedAt.Equal(created) || !box2.UpdatedAt.Equal(clk.Now()) {
		t.Fatalf("box times: created %v/%v, after append %v/%v; clock %v then %v", box.CreatedAt, box.UpdatedAt, box2.CreatedAt, box2.UpdatedAt, created, clk.Now())
	}
}

func TestCloseDrains(t *testing.T) {
	for _, gc := range []bool{true, false} {
		t.Run(fmt.Sprintf("group-commit=%v", gc), func(t *testing.T) {
			ctx := t.Context()
			path := filepath.Join(t.TempDir(), "cards.db")
			s, err := boltstore.Open(path, boltstore.WithGroupCommit(gc))
			if err != nil {
				t.Fatal(err)
			}
			const writers, each = 16, 20
			cards := make([][]*card.Card, writers)
			errs := make([][]error, writers)
			var wg sync.WaitGroup
			started := make(chan struct{}, writers)
			for w := range writers {
				cards[w] = make([]*card.Card, each)
				errs[w] = make([]error, each)
				wg.Go(func() {
					started <- struct{}{}
					for i := range each {
						cards[w][i] = storetest.NoteCard("p", fmt.Sprintf("turn-%d", w), "x")
						errs[w][i] = s.Put(ctx, cards[w][i])
					}
				})
			}
			for range writers {
				<-started
			}
			if err := s.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("second close: %v", err)
			}
			wg.Wait()

			if err := s.Put(ctx, storetest.NoteCard("p", "", "late")); !errors.Is(err, cardstore.ErrClosed) {
				t.Errorf("put after close: got %v, want ErrClosed", err)
			}
			if _, err := s.Get(ctx, "p", card.NewID()); !errors.Is(err, cardstore.ErrClosed) {
				t.Errorf("get after close: got %v, want ErrClosed", err)
			}
			if _, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: "k", Holder: "h", Lease: time.Second}); !errors.Is(err, cardstore.ErrClosed) {
				t.Errorf("claim after close: got %v, want ErrClosed", err)
			}
			checkFile(t, path)

			s, err = boltstore.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			stored, closed := 0, 0
			for w := range writers {
				var want []string
				for i, err := range errs[w] {
					switch {
					case err == nil:
						want = append(want, cards[w][i].CardID)
						stored++
					case errors.Is(err, cardstore.ErrClosed):
						closed++
						if _, err := s.Get(ctx, "p", cards[w][i].CardID); !errors.Is(err, cardstore.ErrNotFound) {
							t.Errorf("a put that got ErrClosed is stored (get: %v)", err)
						}
					default:
						t.Errorf("writer %d put %d: %v", w, i, err)
					}
				}
				all, err := cardstore.AllTurn(ctx, s, "p", fmt.Sprintf("turn-%d", w))
				if err != nil {
					t.Fatal(err)
				}
				got := make([]string, len(all))
				for i, c := range all {
					got[i] = c.CardID
				}
				if strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("writer %d: stored %v, want exactly the acknowledged %v", w, got, want)
				}
			}
			t.Logf("%d puts acknowledged before close, %d refused with ErrClosed", stored, closed)
		})
	}
}

// downgrade makes the closed store file at path one of an older schema
// version: it rewrites it in the version 3 layout (toV3), deletes the
// buckets that version lacks and sets the version.
func downgrade(t *testing.T, path, version string, buckets ...string) {
	t.Helper()
	toV3(t, path)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range buckets {
			if err := tx.DeleteBucket([]byte(name)); err != nil {
				return err
			}
		}
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), []byte(version))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("downgrade %s to schema version %s: %v", path, version, err)
	}
}

// TestUpgradeFromVersion1 opens a schema version 1 file (the version 2
// layout without the turn summary buckets) and checks that Open builds the
// summaries ListTurns reads, bumps the version, and that writes after the
// upgrade keep them up to date.
func TestUpgradeFromVersion1(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "cards.db")
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	r1 := storetest.ToolResultCard("p", "t-1", "c1", card.StatusSuccess) // first card names no agent
	call1 := storetest.ToolCallCard("p", "t-1", "c1")
	puts := [][]*card.Card{
		{r1, storetest.NoteCard("p", "", "no turn")},
		{storetest.ToolCallCard("p", "t-2", "c1"), storetest.ToolCallCard("p", "t-2", "c2")},
		{call1, storetest.ToolResultCard("p", "t-2", "c1", card.StatusFailed)},
		{storetest.NoteCard("q", "t-1", "other project")},
	}
	for _, cards := range puts {
		if err := s.Put(ctx, cards...); err != nil {
			t.Fatal(err)
		}
	}
	list := func(s *boltstore.Store, project, agent string) string {
		t.Helper()
		res, err := s.ListTurns(ctx, cardstore.ListTurnsRequest{ProjectID: project, AgentID: agent})
		if err != nil {
			t.Fatalf("list turns of project %s: %v", project, err)
		}
		b, _ := json.Marshal(res)
		return string(b)
	}
	before := map[string]string{"p": list(s, "p", ""), "q": list(s, "q", ""), "p/agent-1": list(s, "p", "agent-1")}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	downgrade(t, path, "1", "turninfo", "turnlist", "agentturns", "outbox")

	s, err = boltstore.Open(path)
	if err != nil {
		t.Fatalf("open of a version 1 file: %v", err)
	}
	after := map[string]string{"p": list(s, "p", ""), "q": list(s, "q", ""), "p/agent-1": list(s, "p", "agent-1")}
	for k := range before {
		if before[k] != after[k] {
			t.Errorf("turns of %s after the upgrade:\n%s\nbefore:\n%s", k, after[k], before[k])
		}
	}
	if !strings.Contains(after["p"], `"agent_turn_id":"t-2"`) || !strings.Contains(after["p/agent-1"], `"agent_turn_id":"t-1"`) {
		t.Fatalf("upgraded listing lacks a turn: %s / %s", after["p"], after["p/agent-1"])
	}
	note := storetest.NoteCard("p", "t-1", "after the upgrade")
	if err := s.Put(ctx, note, storetest.NoteCard("p", "t-3", "new turn")); err != nil {
		t.Fatal(err)
	}
	res, err := s.ListTurns(ctx, cardstore.ListTurnsRequest{ProjectID: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Turns) != 3 || res.Turns[0].AgentTurnID != "t-3" || res.Turns[2].AgentTurnID != "t-1" || res.Turns[2].Cards != 3 || !res.Turns[2].LastAt.Equal(note.CreatedAt) {
		t.Fatalf("turns after a put following the upgrade = %+v", res.Turns)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkFile(t, path)
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket([]byte("meta")).Get([]byte("schema_version")); string(v) != "4" {
			t.Errorf("schema version after the upgrade = %q, want \"4\"", v)
		}
		return nil
	})

	// A version 1 file that lacks one of its own buckets is refused.
	broken := filepath.Join(t.TempDir(), "broken.db")
	db2, err := bolt.Open(broken, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db2.Update(func(tx *bolt.Tx) error {
		m, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		return m.Put([]byte("schema_version"), []byte("1"))
	})
	db2.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := boltstore.Open(broken); !errors.Is(err, boltstore.ErrSchemaVersion) || !strings.Contains(err.Error(), "lacks bucket") {
		t.Fatalf("open of a version 1 file without its buckets: got %v, want ErrSchemaVersion naming the bucket", err)
	}
}
