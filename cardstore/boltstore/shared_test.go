package boltstore_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// recordHook is a ResultHook that writes the result's id into a bucket of
// its own, in the store's transaction, and counts its calls and afters.
type recordHook struct {
	mu     sync.Mutex
	calls  []string // result card ids, one per ResultStored run
	callOf []string // the tool.call card id handed over ("" for nil)
	afters []string // result card ids whose after ran
	fail   error    // returned by ResultStored when set
	commit *commits // the committer's observer: after must see the commit
	seen   []int    // commits observed when each after ran
}

var hookBucket = []byte("hooked")

var _ boltstore.ResultHook = (*recordHook)(nil)

func (h *recordHook) ResultStored(tx *bolt.Tx, result, call *card.Card, _ []byte) (func(), error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, result.CardID)
	callID := ""
	if call != nil {
		callID = call.CardID
	}
	h.callOf = append(h.callOf, callID)
	b, err := tx.CreateBucketIfNotExists(hookBucket)
	if err != nil {
		return nil, err
	}
	if err := b.Put([]byte(result.CardID), []byte(result.ToolCallID)); err != nil {
		return nil, err
	}
	if h.fail != nil {
		return nil, h.fail
	}
	id := result.CardID
	return func() {
		h.commit.mu.Lock()
		n := h.commit.txs
		h.commit.mu.Unlock()
		h.mu.Lock()
		h.afters = append(h.afters, id)
		h.seen = append(h.seen, n)
		h.mu.Unlock()
	}, nil
}

// openSharedStore opens a file as a node does (boltfile.Open, one
// committer with an observer) and the store on it with hook; cleanup
// closes the store, the committer and the file, then checks the file.
func openSharedStore(t *testing.T, hook boltstore.ResultHook, obs *commits) (*boltstore.Store, *bolt.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cards.db")
	db, err := boltfile.Open(path, boltfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cm := boltfile.NewCommitter(db, boltfile.CommitConfig{Observer: obs})
	s, err := boltstore.OpenShared(db, cm, boltstore.WithResultHook(hook))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		cm.Close()
		if err := db.Close(); err != nil {
			t.Errorf("close file: %v", err)
		}
		checkFile(t, path)
	})
	return s, db
}

// hooked returns the hook bucket's keys.
func hooked(t *testing.T, db *bolt.DB) []string {
	t.Helper()
	var out []string
	err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(hookBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error { out = append(out, string(k)); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestResultHook: the hook runs in the transaction of a new tool.result
// card (one commit carries the card and the hook's write; after runs once
// that commit is observed, before Put returns), with the call's tool.call
// card; not for other cards, a repeat of the result or a second result.
func TestResultHook(t *testing.T) {
	ctx := t.Context()
	obs := &commits{}
	h := &recordHook{commit: obs}
	s, db := openSharedStore(t, h, obs)

	call := storetest.ToolCallCard("p", "turn-1", "call-1")
	note := storetest.NoteCard("p", "turn-1", "thinking")
	if err := s.Put(ctx, call, note); err != nil {
		t.Fatal(err)
	}
	if len(h.calls) != 0 {
		t.Fatalf("hook ran for a tool.call and a note: %v", h.calls)
	}
	obs.mu.Lock()
	before := obs.txs
	obs.mu.Unlock()
	res := storetest.ToolResultCard("p", "turn-1", "call-1", card.StatusSuccess)
	if err := s.Put(ctx, res); err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	txs := obs.txs - before
	obs.mu.Unlock()
	if txs != 1 {
		t.Fatalf("the result's Put took %d commits, want 1", txs)
	}
	if fmt.Sprint(h.calls) != fmt.Sprint([]string{res.CardID}) || fmt.Sprint(h.callOf) != fmt.Sprint([]string{call.CardID}) {
		t.Fatalf("hook calls %v with call cards %v, want [%s] with [%s]", h.calls, h.callOf, res.CardID, call.CardID)
	}
	if len(h.afters) != 1 || h.seen[0] != before+1 {
		t.Fatalf("after ran %d times, seeing %v commits; want once, after commit %d", len(h.afters), h.seen, before+1)
	}
	if got := hooked(t, db); fmt.Sprint(got) != fmt.Sprint([]string{res.CardID}) {
		t.Fatalf("hook bucket = %v, want the result", got)
	}

	// A repeat of the same card, a second result and a card of no call:
	// no hook.
	if err := s.Put(ctx, res); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, storetest.ToolResultCard("p", "turn-1", "call-1", card.StatusFailed)); !errors.Is(err, cardstore.ErrResultExists) {
		t.Fatalf("second result: %v, want ErrResultExists", err)
	}
	if err := s.Put(ctx, storetest.NoteCard("p", "", "no turn")); err != nil {
		t.Fatal(err)
	}
	if len(h.calls) != 1 || len(h.afters) != 1 {
		t.Fatalf("hook ran again: calls %v, afters %v", h.calls, h.afters)
	}

	// A result whose tool.call card is not in the store: the hook runs
	// with call nil.
	orphan := storetest.ToolResultCard("p", "turn-2", "call-9", card.StatusSuccess)
	if err := s.Put(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	if h.callOf[1] != "" {
		t.Fatalf("call card of a call without one = %q, want none", h.callOf[1])
	}
}

// TestResultHookFindsAdmissionCard: a call card with the admission's id
// (utp.CallRef.CallCardID) is handed to the hook however far back in the
// turn it is; one with another id only within the last CallScanLimit
// cards of the turn.
func TestResultHookFindsAdmissionCard(t *testing.T) {
	ctx := t.Context()
	obs := &commits{}
	h := &recordHook{commit: obs}
	s, _ := openSharedStore(t, h, obs)

	admitted := storetest.ToolCallCard("p", "turn-long", "call-a")
	admitted.CardID = utp.Ref("p", "turn-long", "call-a").CallCardID()
	raw := storetest.ToolCallCard("p", "turn-long", "call-r")
	if err := s.Put(ctx, admitted, raw); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < boltstore.CallScanLimit+10; i += 50 {
		var notes []*card.Card
		for j := 0; j < 50; j++ {
			notes = append(notes, storetest.NoteCard("p", "turn-long", fmt.Sprint("note ", i+j)))
		}
		if err := s.Put(ctx, notes...); err != nil {
			t.Fatal(err)
		}
	}
	for _, call := range []string{"call-a", "call-r"} {
		if err := s.Put(ctx, storetest.ToolResultCard("p", "turn-long", call, card.StatusSuccess)); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{admitted.CardID, ""}; fmt.Sprint(h.callOf) != fmt.Sprint(want) {
		t.Fatalf("call cards handed to the hook = %q, want %q (the admission's found by id, the other beyond the scan)", h.callOf, want)
	}
}

// TestResultHookFails: an error of the hook fails the Put, and nothing of
// it is written — not the card, not its claim's end, not the hook's
// write; a Put sharing the transaction commits without it.
func TestResultHookFails(t *testing.T) {
	ctx := t.Context()
	obs := &commits{}
	h := &recordHook{commit: obs, fail: errors.New("entry refused")}
	s, db := openSharedStore(t, h, obs)
	if err := s.Put(ctx, storetest.ToolCallCard("p", "turn-1", "call-1")); err != nil {
		t.Fatal(err)
	}
	key := cardstore.CallKey{AgentTurnID: "turn-1", ToolCallID: "call-1"}.String()
	claim, err := s.Claim(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: key, Holder: "w1", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	res := storetest.ToolResultCard("p", "turn-1", "call-1", card.StatusSuccess)
	var wg sync.WaitGroup
	others := make([]error, 8)
	for i := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			others[i] = s.Put(ctx, storetest.NoteCard("p", "turn-1", fmt.Sprint("note ", i)))
		}()
	}
	err = s.Put(ctx, res)
	wg.Wait()
	if err == nil || !strings.Contains(err.Error(), "entry refused") {
		t.Fatalf("Put = %v, want the hook's error", err)
	}
	for i, err := range others {
		if err != nil {
			t.Errorf("note %d sharing the transaction: %v", i, err)
		}
	}
	if _, err := s.Get(ctx, "p", res.CardID); !errors.Is(err, cardstore.ErrNotFound) {
		t.Fatalf("the refused result: %v, want ErrNotFound", err)
	}
	if _, err := s.FindToolResult(ctx, "p", "turn-1", "call-1"); !errors.Is(err, cardstore.ErrNotFound) {
		t.Fatalf("results index: %v, want ErrNotFound", err)
	}
	got, err := s.GetClaim(ctx, "p", key)
	if err != nil || got.Holder != "w1" || got.Token != claim.Token {
		t.Fatalf("claim after the refused result = %+v, %v; want w1's, still held", got, err)
	}
	if got := hooked(t, db); len(got) != 0 {
		t.Fatalf("hook bucket = %v, want nothing written", got)
	}
	if len(h.afters) != 0 {
		t.Fatalf("after ran for a refused Put: %v", h.afters)
	}
}

// TestOpenSharedRefuses: a shared store takes no option of the file or
// its committer, and needs both.
func TestOpenSharedRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cards.db")
	db, err := boltfile.Open(path, boltfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cm := boltfile.NewCommitter(db, boltfile.CommitConfig{})
	defer cm.Close()
	for name, opt := range map[string]boltstore.Option{
		"observer":     boltstore.WithCommitObserver(&commits{}),
		"group commit": boltstore.WithGroupCommit(false),
		"open timeout": boltstore.WithOpenTimeout(time.Second),
	} {
		if _, err := boltstore.OpenShared(db, cm, opt); !errors.Is(err, cardstore.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := boltstore.OpenShared(nil, cm); !errors.Is(err, cardstore.ErrInvalid) {
		t.Errorf("no file: %v, want ErrInvalid", err)
	}
	if _, err := boltstore.OpenShared(db, nil); !errors.Is(err, cardstore.ErrInvalid) {
		t.Errorf("no committer: %v, want ErrInvalid", err)
	}
}

// TestConformanceShared: a store on a shared file (OpenShared, the
// caller's committer) passes the suite, with a hook on every result.
func TestConformanceShared(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) cardstore.Store {
		obs := &commits{}
		s, _ := openSharedStore(t, &recordHook{commit: obs}, obs)
		return s
	})
}
