package boltinbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// openTest opens a fresh inbox file and ends the test with its closing
// and a consistency check.
func openTest(t *testing.T) *DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "inbox.db")
	d, err := Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
		if err := Check(path); err != nil {
			t.Error(err)
		}
	})
	return d
}

// TestMarkSentFirstWins pins what keeps the wakeup observer from counting an
// entry twice: of concurrent markSent calls (a report and its duplicate
// racing), exactly one says it made the mark.
func TestMarkSentFirstWins(t *testing.T) {
	d := openTest(t)
	ctx := context.Background()
	e := insertOne(ctx, t, d)
	const n = 8
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		firsts int
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first, err := d.markSent(ctx, "p1", e.InboxID, time.Now())
			if err != nil {
				t.Error(err)
				return
			}
			if first {
				mu.Lock()
				firsts++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firsts != 1 {
		t.Fatalf("markSent said first %d times of %d, want exactly 1", firsts, n)
	}
	got, err := d.Get(ctx, "p1", e.InboxID)
	if err != nil || got.WakeupSentAt == nil {
		t.Fatalf("entry after markSent: %+v, %v; want wakeup_sent_at set", got, err)
	}
}

// groupSizes records the group size of every inbox commit.
type groupSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (g *groupSizes) Committed(n int, _ time.Duration) {
	g.mu.Lock()
	g.sizes = append(g.sizes, n)
	g.mu.Unlock()
}

func (g *groupSizes) get() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.sizes...)
}

// TestMarkSentRidesWithNextWrite: the wakeup-sent mark costs no commit of
// its own; it lands in the transaction of the next write (here the next
// report's entry), and its first-wins answer arrives after that commit.
func TestMarkSentRidesWithNextWrite(t *testing.T) {
	d := openTest(t)
	ctx := context.Background()
	obs := &groupSizes{}
	d.commits.Close()
	d.commits = boltfile.NewCommitter(d.bolt, boltfile.CommitConfig{Observer: obs, LaterDelay: time.Hour})
	report := func(call string) *utp.Report {
		return &utp.Report{AgentID: "a1", AgentTurnID: "t1", TurnEpoch: 1, ToolCallID: call,
			ToolResultCardID: card.NewID(), Status: card.StatusSuccess, AfterExecution: card.Suspend}
	}
	e1, _, err := d.Insert(ctx, "p1", "main", report("c1"), utp.NewTraceparent())
	if err != nil {
		t.Fatal(err)
	}
	type mark struct {
		first bool
		err   error
	}
	marks := make(chan mark, 2)
	d.MarkSentLater("p1", e1.InboxID, time.Now(), func(first bool, err error) { marks <- mark{first, err} })
	if got := obs.get(); len(got) != 1 {
		t.Fatalf("commits after markSentLater: %v, want only the first insert's", got)
	}
	if _, _, err := d.Insert(ctx, "p1", "main", report("c2"), utp.NewTraceparent()); err != nil {
		t.Fatal(err)
	}
	if m := <-marks; !m.first || m.err != nil {
		t.Fatalf("mark: first %v, err %v; want first, no error", m.first, m.err)
	}
	if got := obs.get(); len(got) != 2 || got[1] != 2 {
		t.Fatalf("commits %v, want [1 2]: the mark shares the second insert's transaction", got)
	}
	got, err := d.Get(ctx, "p1", e1.InboxID)
	if err != nil || got.WakeupSentAt == nil {
		t.Fatalf("entry: %+v, %v; want wakeup_sent_at set", got, err)
	}
	d.MarkSentLater("p1", e1.InboxID, time.Now(), func(first bool, err error) { marks <- mark{first, err} })
	d.MarkSentLater("p1", "no-such-entry", time.Now(), func(first bool, err error) { marks <- mark{first, err} })
	if err := d.Close(); err != nil { // close commits the waiting marks
		t.Fatal(err)
	}
	for range 2 {
		m := <-marks
		switch {
		case m.err == nil && m.first:
			t.Fatal("a second mark of one entry said first")
		case m.err != nil && !errors.Is(m.err, inbox.ErrNotFound):
			t.Fatalf("mark of a missing entry: %v, want ErrNotFound", m.err)
		}
	}
}

// TestConcurrentReportsShareACommit: reports stored while a commit runs
// share the next transaction (one fsync for all of them), and each still
// gets its own entry.
func TestConcurrentReportsShareACommit(t *testing.T) {
	d := openTest(t)
	ctx := context.Background()
	obs := &groupSizes{}
	d.commits.Close()
	d.commits = boltfile.NewCommitter(d.bolt, boltfile.CommitConfig{Observer: obs})
	entered, unblock := make(chan struct{}), make(chan struct{})
	blocked := make(chan error, 1)
	go func() {
		blocked <- d.update(ctx, func(*bolt.Tx) error { close(entered); <-unblock; return nil })
	}()
	<-entered
	const n = 8
	ids := make(chan string, n)
	for i := range n {
		go func() {
			rep := &utp.Report{AgentID: "a1", AgentTurnID: "t1", TurnEpoch: 1, ToolCallID: fmt.Sprint("c", i),
				ToolResultCardID: card.NewID(), Status: card.StatusSuccess, AfterExecution: card.Suspend}
			e, created, err := d.Insert(ctx, "p1", "main", rep, utp.NewTraceparent())
			if err != nil || !created {
				t.Errorf("insert %d: created %v, %v", i, created, err)
				ids <- ""
				return
			}
			ids <- e.InboxID
		}()
	}
	deadline := time.Now().Add(30 * time.Second) // a failure bound, not a timing assertion
	for d.commits.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d inserts queued", d.commits.Queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
	close(unblock)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range n {
		seen[<-ids] = true
	}
	if len(seen) != n || seen[""] {
		t.Fatalf("entries %v, want %d distinct", seen, n)
	}
	if got := obs.get(); len(got) != 2 || got[1] != n {
		t.Fatalf("commit group sizes %v, want [1 %d]: the %d reports share one transaction", got, n, n)
	}
}

// TestAckLaterRidesWithNextWrite: a lazy ack reads acked at once, is
// carried to disk by the next transaction, and leaves no overlay behind.
func TestAckLaterRidesWithNextWrite(t *testing.T) {
	d := openTest(t)
	ctx := context.Background()
	e := insertOne(ctx, t, d)
	done := make(chan error, 1)
	if n, err := d.AckLater(ctx, "p1", []string{e.InboxID}, time.Now(), func(err error) { done <- err }); err != nil || n != 1 {
		t.Fatalf("AckLater = %d, %v; want 1", n, err)
	}
	if err := d.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	d.lazyMu.Lock()
	left := len(d.lazy)
	d.lazyMu.Unlock()
	if left != 0 {
		t.Fatalf("%d lazy acks still queued after a commit", left)
	}
	if st := fileState(t, d, "p1", e.InboxID); st != inbox.StateAcked {
		t.Fatalf("entry in the file after the commit: %s, want acked", st)
	}
}

// TestAckLaterCommitsAlone: with no other write coming, a lazy ack still
// reaches the disk on its own.
func TestAckLaterCommitsAlone(t *testing.T) {
	d := openTest(t)
	ctx := context.Background()
	e := insertOne(ctx, t, d)
	done := make(chan error, 1)
	if _, err := d.AckLater(ctx, "p1", []string{e.InboxID}, time.Now(), func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil { // no Flush: the committer writes it alone
		t.Fatal(err)
	}
	if st := fileState(t, d, "p1", e.InboxID); st != inbox.StateAcked {
		t.Fatalf("entry in the file: %s, want acked", st)
	}
}

// fileState reads the entry's state from the file, past the lazy overlay.
func fileState(t *testing.T, d *DB, project, id string) inbox.State {
	t.Helper()
	var st inbox.State
	if err := d.bolt.View(func(tx *bolt.Tx) error {
		r, err := getRecord(tx, project, id)
		if r != nil {
			st = r.State
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return st
}

// insertOne stores the entry of one successful call (project p1, agent a1,
// turn t1, call c1) and returns it.
func insertOne(ctx context.Context, t *testing.T, d *DB) *inbox.Entry {
	t.Helper()
	rep := &utp.Report{AgentID: "a1", AgentTurnID: "t1", TurnEpoch: 1, ToolCallID: "c1",
		ToolResultCardID: card.NewID(), Status: card.StatusSuccess, AfterExecution: card.Suspend}
	e, _, err := d.Insert(ctx, "p1", "main", rep, utp.NewTraceparent())
	if err != nil {
		t.Fatal(err)
	}
	return e
}
