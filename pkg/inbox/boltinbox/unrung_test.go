package boltinbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// TestUnrung: the pages of Unrung, whatever their size, list exactly the
// pending entries without a wakeup-sent mark, across projects and agents:
// not the marked ones, not an acked one (lazily acked included), not a
// stale one.
func TestUnrung(t *testing.T) {
	d := openTest(t)
	ctx := context.Background()
	insert := func(project, agent, call string, epoch int64) *inbox.Entry {
		t.Helper()
		rep := &utp.Report{AgentID: agent, AgentTurnID: "t1", TurnEpoch: epoch, ToolCallID: call,
			ToolResultCardID: card.NewID(), Status: card.StatusSuccess, AfterExecution: card.Suspend}
		e, _, err := d.Insert(ctx, project, "main", rep, "")
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	var want []string
	markedFirst := time.Now().Add(-time.Hour)
	markedSince := markedFirst.Add(time.Minute)
	for i := range 9 {
		project, agent := fmt.Sprint("p", i%3), fmt.Sprint("a", i%2)
		e := insert(project, agent, fmt.Sprint("c", i), 1)
		switch i {
		case 1, 4: // rung and marked, a minute apart
			at := markedFirst
			if i == 4 {
				at = markedSince
			}
			if _, err := d.markSent(ctx, project, e.InboxID, at); err != nil {
				t.Fatal(err)
			}
		case 2: // acked
			if _, err := d.Ack(ctx, project, []string{e.InboxID}, time.Now()); err != nil {
				t.Fatal(err)
			}
		case 5: // acked lazily, not committed yet
			if _, err := d.AckLater(ctx, project, []string{e.InboxID}, time.Now(), nil); err != nil {
				t.Fatal(err)
			}
		default:
			want = append(want, e.InboxID)
		}
	}
	// A stale entry: the turn's epoch moved past its report's.
	if _, _, err := d.SetEpoch(ctx, "p9", "t1", 5); err != nil {
		t.Fatal(err)
	}
	insert("p9", "a0", "old", 1)
	slices.Sort(want)

	for _, scan := range []int{1, 2, 3, 100} {
		t.Run(fmt.Sprint("scan=", scan), func(t *testing.T) {
			var got []string
			cursor := ""
			for pages := 0; ; pages++ {
				if pages > 20 {
					t.Fatal("Unrung does not end")
				}
				page, next, err := d.Unrung(ctx, cursor, scan, time.Time{})
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range page {
					got = append(got, e.InboxID)
				}
				if next == "" {
					break
				}
				cursor = next
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("unrung entries = %v, want %v", got, want)
			}
		})
	}
	// Marked at or after markedSince: listed too (a wakeup stream that
	// acknowledges before its fsync may have lost their wakeups).
	if page, _, err := d.Unrung(ctx, "", 100, markedSince); err != nil || len(page) != len(want)+1 {
		t.Fatalf("Unrung since the second mark = %d entries, %v; want %d (the unmarked ones and the later marked one)", len(page), err, len(want)+1)
	}
	if page, _, err := d.Unrung(ctx, "", 100, markedFirst); err != nil || len(page) != len(want)+2 {
		t.Fatalf("Unrung since the first mark = %d entries, %v; want %d", len(page), err, len(want)+2)
	}
	if _, _, err := d.Unrung(ctx, "", 0, time.Time{}); !errors.Is(err, inbox.ErrInvalid) {
		t.Fatalf("Unrung with scan 0: %v, want ErrInvalid", err)
	}
}
