package retention_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/jsstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/boltinbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/kvinbox"
	"github.com/utpmesh/utpmesh/pkg/retention"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

const project = "demo"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fixture is a CardStore and an inbox, and a sweeper over them whose
// clock the test sets.
type fixture struct {
	store   cardstore.Store
	inbox   inbox.Backend
	archive *retention.FileArchive
	now     time.Time
	sw      *retention.Sweeper
}

// newFixture is a fixture on bbolt files (the single-node mesh's).
func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	st, err := boltstore.Open(filepath.Join(dir, "cards.db"))
	if err != nil {
		t.Fatal(err)
	}
	ib, err := boltinbox.Open(filepath.Join(dir, "inbox.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ib.Close()
		_ = st.Close()
		if err := boltinbox.Check(filepath.Join(dir, "inbox.db")); err != nil {
			t.Error(err)
		}
	})
	return withSweeper(t, st, ib)
}

// newJSFixture is a fixture on a JetStream stream and bucket (cluster
// mode's backends, here on one server).
func newJSFixture(t *testing.T) *fixture {
	t.Helper()
	nc := meshtest.Conn(t, meshtest.NATS(t))
	st, err := jsstore.Open(t.Context(), nc, jsstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	bk, err := kvinbox.OpenBucket(t.Context(), js, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	ib := kvinbox.New(bk)
	t.Cleanup(func() {
		_ = ib.Close()
		if err := ib.Check(context.Background()); err != nil {
			t.Error(err)
		}
		_ = st.Close()
	})
	return withSweeper(t, st, ib)
}

func withSweeper(t *testing.T, st cardstore.Store, ib inbox.Backend) *fixture {
	t.Helper()
	f := &fixture{store: st, inbox: ib, now: time.Now()}
	f.archive = &retention.FileArchive{Dir: filepath.Join(t.TempDir(), "archive"), Clock: func() time.Time { return f.now }}
	var err error
	f.sw, err = retention.New(retention.Config{Store: st, Inbox: ib, Archive: f.archive, Clock: func() time.Time { return f.now }, Holder: "sweeper-1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// backends runs fn on each backend pair.
func backends(t *testing.T, fn func(t *testing.T, f *fixture)) {
	for _, b := range []struct {
		name string
		open func(t *testing.T) *fixture
	}{{"bbolt", newFixture}, {"jetstream", newJSFixture}} {
		t.Run(b.name, func(t *testing.T) { fn(t, b.open(t)) })
	}
}

// call writes a turn with one call of agent-a made at at: its tool.call
// card, its tool.result card unless running, and the result's inbox
// entry, acked when acked.
func (f *fixture) call(t *testing.T, turn string, at time.Time, running, acked bool) []*card.Card {
	t.Helper()
	ctx := context.Background()
	c := storetest.ToolCallCard(project, turn, "c1")
	c.Metadata.AgentID, c.CreatedAt = "agent-a", at
	cards := []*card.Card{c}
	if !running {
		r := storetest.ToolResultCard(project, turn, "c1", card.StatusSuccess)
		r.CreatedAt = at.Add(time.Second)
		cards = append(cards, r)
	}
	if err := f.store.Put(ctx, cards...); err != nil {
		t.Fatal(err)
	}
	if running {
		return cards
	}
	e, _, err := f.inbox.Insert(ctx, project, "main", &utp.Report{AgentID: "agent-a", AgentTurnID: turn, ToolCallID: "c1",
		ToolResultCardID: cards[1].CardID, Status: card.StatusSuccess, AfterExecution: card.Suspend}, "")
	if err != nil {
		t.Fatal(err)
	}
	if acked {
		if _, err := f.inbox.Ack(ctx, project, []string{e.InboxID}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	return cards
}

func (f *fixture) turns(t *testing.T) []string {
	t.Helper()
	res, err := f.store.ListTurns(context.Background(), cardstore.ListTurnsRequest{ProjectID: project})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ti := range res.Turns {
		out = append(out, ti.AgentTurnID)
	}
	return out
}

// archived reads the archive file of f.now's day: card ids in order.
func (f *fixture) archived(t *testing.T) []string {
	t.Helper()
	fh, err := os.Open(f.archive.Path(project, f.now))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var ids []string
	sc := bufio.NewScanner(fh)
	sc.Buffer(nil, 2<<20)
	for sc.Scan() {
		c, err := card.Parse(sc.Bytes())
		if err != nil {
			t.Fatalf("archive line %q: %v", sc.Text(), err)
		}
		ids = append(ids, c.CardID)
	}
	return ids
}

func TestSweepAge(t *testing.T) { backends(t, testSweepAge) }

func testSweepAge(t *testing.T, f *fixture) {
	ctx := context.Background()
	old := f.now.Add(-48 * time.Hour)
	done := f.call(t, "old-done", old, false, true)
	f.call(t, "old-pending", old, false, false)
	f.call(t, "old-running", old, true, false)
	claimed := f.call(t, "old-claimed", old, false, true)
	recent := f.call(t, "recent", f.now.Add(-time.Hour), false, true)
	// A live claim on a finished call (taken after its result) keeps the turn.
	if _, err := f.store.Claim(ctx, cardstore.ClaimRequest{ProjectID: project, Key: cardstore.CallKey{AgentTurnID: "old-claimed", ToolCallID: "c1"}.String(), Holder: "w", Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}

	rep, err := f.sw.Sweep(ctx, project, retention.Policy{MaxAge: 24 * time.Hour}, false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rep.Deleted, ",") != "old-done" || rep.Cards != 2 || rep.Entries != 1 || rep.Turns != 5 || rep.Over != 4 {
		t.Fatalf("report %+v: want old-done deleted (2 cards, 1 entry) of 5 turns, 4 over the age", rep)
	}
	kept := map[string]string{}
	for _, k := range rep.Kept {
		kept[k.AgentTurnID] = k.Reason
	}
	for turn, want := range map[string]string{"old-pending": "not consumed", "old-running": "no result", "old-claimed": "live claim"} {
		if !strings.Contains(kept[turn], want) {
			t.Errorf("turn %s: kept reason %q, want one saying %q", turn, kept[turn], want)
		}
	}
	// The archive holds the deleted turn's cards in replay order.
	if got := f.archived(t); strings.Join(got, ",") != done[0].CardID+","+done[1].CardID {
		t.Fatalf("archive = %v, want the cards of old-done in order", got)
	}
	if _, err := f.store.Get(ctx, project, done[0].CardID); !errors.Is(err, cardstore.ErrNotFound) {
		t.Fatalf("deleted card: %v", err)
	}
	if es, err := f.inbox.List(ctx, project, inbox.ListQuery{AgentID: "agent-a", AgentTurnID: "old-done", State: inbox.StateAll, Limit: 10}); err != nil || len(es) != 0 {
		t.Fatalf("inbox entries of the deleted turn: %v, %v", es, err)
	}
	// Kept turns replay whole.
	for turn, want := range map[string][]*card.Card{"old-claimed": claimed, "recent": recent} {
		got, err := cardstore.AllTurn(ctx, f.store, project, turn)
		if err != nil || len(got) != len(want) || got[0].CardID != want[0].CardID || got[1].CardID != want[1].CardID {
			t.Fatalf("kept turn %s: %v, %v", turn, got, err)
		}
	}
	// Once the pending result is consumed, the next sweep takes its turn.
	es, err := f.inbox.List(ctx, project, inbox.ListQuery{AgentID: "agent-a", AgentTurnID: "old-pending", State: inbox.StatePending, Limit: 10})
	if err != nil || len(es) != 1 {
		t.Fatalf("pending entry: %v, %v", es, err)
	}
	if _, err := f.inbox.Ack(ctx, project, []string{es[0].InboxID}, time.Now()); err != nil {
		t.Fatal(err)
	}
	rep, err = f.sw.Sweep(ctx, project, retention.Policy{MaxAge: 24 * time.Hour}, false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rep.Deleted, ",") != "old-pending" {
		t.Fatalf("second sweep deleted %v, want old-pending", rep.Deleted)
	}
	if got := strings.Join(f.turns(t), ","); got != "recent,old-claimed,old-running" {
		t.Fatalf("turns left %s", got)
	}
}

func TestSweepSizeAndDryRun(t *testing.T) { backends(t, testSweepSizeAndDryRun) }

func testSweepSizeAndDryRun(t *testing.T, f *fixture) {
	ctx := context.Background()
	for i, turn := range []string{"t1", "t2", "t3", "t4"} {
		f.call(t, turn, f.now.Add(time.Duration(i-10)*time.Minute), false, true)
	}
	res, err := f.store.ListTurns(ctx, cardstore.ListTurnsRequest{ProjectID: project, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	two := res.Turns[0].Bytes + res.Turns[1].Bytes
	pol := retention.Policy{MaxBytes: two}

	dry, err := f.sw.Sweep(ctx, project, pol, true)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(dry.Deleted, ",") != "t1,t2" || !dry.DryRun {
		t.Fatalf("dry run %+v: want t1,t2 (oldest first) to go", dry)
	}
	if got := strings.Join(f.turns(t), ","); got != "t4,t3,t2,t1" || f.archived(t) != nil {
		t.Fatalf("a dry run changed something: turns %s, archive %v", got, f.archived(t))
	}
	rep, err := f.sw.Sweep(ctx, project, pol, false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rep.Deleted, ",") != "t1,t2" || rep.Bytes != dry.Bytes {
		t.Fatalf("sweep %+v: want t1,t2 deleted, as the dry run said", rep)
	}
	if got := strings.Join(f.turns(t), ","); got != "t4,t3" {
		t.Fatalf("turns left %s, want t4,t3", got)
	}
	if n := len(f.archived(t)); n != 4 {
		t.Fatalf("archive holds %d cards, want 4", n)
	}
}

func TestSweepOneAtATime(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.call(t, "old", f.now.Add(-48*time.Hour), false, true)
	if _, err := f.store.Claim(ctx, cardstore.ClaimRequest{ProjectID: project, Key: retention.ClaimKey(project), Holder: "another-node", Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	rep, err := f.sw.Sweep(ctx, project, retention.Policy{MaxAge: time.Hour}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Skipped || len(rep.Deleted) != 0 {
		t.Fatalf("sweep while another sweeper holds the project: %+v, want skipped", rep)
	}
	if err := f.store.Release(ctx, project, retention.ClaimKey(project), "another-node"); err != nil {
		t.Fatal(err)
	}
	rep, err = f.sw.Sweep(ctx, project, retention.Policy{MaxAge: time.Hour}, false)
	if err != nil || len(rep.Deleted) != 1 {
		t.Fatalf("sweep: %+v, %v", rep, err)
	}
	// The sweep released its claim.
	if _, err := f.store.GetClaim(ctx, project, retention.ClaimKey(project)); !errors.Is(err, cardstore.ErrNotFound) {
		t.Fatalf("claim after the sweep: %v, want none", err)
	}
}

func TestPolicyCheck(t *testing.T) {
	for _, tc := range []struct {
		p    retention.Policy
		want string
	}{
		{retention.Policy{MaxAge: -time.Hour}, "max_age"},
		{retention.Policy{MaxAge: time.Second}, "at least 1m0s"},
		{retention.Policy{MaxBytes: -1}, "max_bytes"},
	} {
		err := tc.p.Check()
		if !errors.Is(err, retention.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%+v) = %v, want ErrInvalid naming %q", tc.p, err, tc.want)
		}
	}
	for _, p := range []retention.Policy{{}, {MaxAge: time.Hour}, {MaxBytes: 1 << 20}} {
		if err := p.Check(); err != nil {
			t.Errorf("Check(%+v) = %v", p, err)
		}
	}
}

type policies map[string]retention.Policy

func (p policies) Policy(_ context.Context, project string) (retention.Policy, bool, error) {
	pol, ok := p[project]
	return pol, ok, nil
}

func TestStartSweepsConfiguredProjects(t *testing.T) {
	f := newFixture(t)
	f.call(t, "old", f.now.Add(-48*time.Hour), false, true)
	sw, err := retention.New(retention.Config{Store: f.store, Inbox: f.inbox, Archive: f.archive, Clock: func() time.Time { return f.now },
		Projects: []string{project, "other"}, Policies: policies{project: {MaxAge: time.Hour}}, Interval: 10 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	sw.Start()
	defer sw.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for len(f.turns(t)) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the started sweeper never removed the old turn")
		}
		time.Sleep(10 * time.Millisecond)
	}
	sw.Stop()
	sw.Stop() // idempotent
}
