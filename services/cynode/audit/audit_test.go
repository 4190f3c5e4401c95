package audit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/services/cynode/audit"
	"github.com/utpmesh/utpmesh/subjects"
)

const ver = subjects.DefaultVersion

// start runs a real nats-server with the mesh's streams.
func start(t *testing.T) (*audit.Publisher, jetstream.JetStream) {
	t.Helper()
	nc := meshtest.Conn(t, meshtest.NATS(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(t.Context(), js, ver); err != nil {
		t.Fatal(err)
	}
	p, err := audit.NewPublisher(nc)
	if err != nil {
		t.Fatal(err)
	}
	return p, js
}

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func rec(project, channel, tool, task string, i int) *audit.Record {
	return &audit.Record{Time: t0.Add(time.Duration(i) * time.Minute), ProjectID: project, ChannelID: channel, TaskID: task,
		Subject: "pm-agent", Tool: tool, Server: audit.Server, ToolCallID: fmt.Sprintf("c%d", i), TurnID: "turn",
		GroupIDs: []string{}, RoleNames: []string{}, Decision: audit.DecisionAllow, Status: audit.StatusSuccess}
}

func calls(recs []audit.Record) string {
	var out []string
	for _, r := range recs {
		out = append(out, r.ToolCallID)
	}
	return strings.Join(out, ",")
}

func TestPublishAndList(t *testing.T) {
	p, js := start(t)
	ctx := t.Context()
	// Nothing published yet: an empty answer.
	if got, err := audit.List(ctx, js, ver, audit.Filter{Project: "demo"}); err != nil || len(got) != 0 {
		t.Fatalf("empty stream: %v, %v", got, err)
	}
	for i, r := range []*audit.Record{
		rec("demo", "main", "db.task.get", "t1", 0),
		rec("demo", "side", "artifact.put", "t1", 1),
		rec("other", "main", "db.task.get", "t1", 2),
		rec("demo", "main", "db.task.get", "t2", 3),
		rec("demo", "main", "artifact.put", "t2", 4),
	} {
		r.ToolCallID = fmt.Sprintf("c%d", i)
		if err := p.Publish(ctx, ver, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		f    audit.Filter
		want string
	}{
		{"a project, every channel", audit.Filter{Project: "demo"}, "c0,c1,c3,c4"},
		{"another project", audit.Filter{Project: "other"}, "c2"},
		{"a project without records", audit.Filter{Project: "none"}, ""},
		{"a tool", audit.Filter{Project: "demo", Tool: "db.task.get"}, "c0,c3"},
		{"a task", audit.Filter{Project: "demo", TaskID: "t2"}, "c3,c4"},
		{"tool and task", audit.Filter{Project: "demo", Tool: "artifact.put", TaskID: "t1"}, "c1"},
		{"since (by the record's time)", audit.Filter{Project: "demo", Since: t0.Add(3 * time.Minute)}, "c3,c4"},
		{"the newest", audit.Filter{Project: "demo", Limit: 2}, "c3,c4"},
		{"a negative limit is the default", audit.Filter{Project: "demo", Limit: -1}, "c0,c1,c3,c4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := audit.List(ctx, js, ver, tc.f)
			if err != nil || calls(got) != tc.want {
				t.Fatalf("List = %s, %v; want %s", calls(got), err, tc.want)
			}
		})
	}
	got, err := audit.List(ctx, js, ver, audit.Filter{Project: "demo", Limit: 1})
	if err != nil || len(got) != 1 {
		t.Fatal(got, err)
	}
	if w := rec("demo", "main", "artifact.put", "t2", 4); got[0].Tool != w.Tool || !got[0].Time.Equal(w.Time) || got[0].Server != "cynode" || got[0].Decision != "allow" {
		t.Fatalf("record read back as %+v", got[0])
	}
}

func TestRefusals(t *testing.T) {
	p, js := start(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		f    audit.Filter
		ver  string
		bad  bool // ErrBadFilter
		says string
	}{
		{"no project", audit.Filter{}, ver, true, "a project is required (--project P)"},
		{"a project that is no subject token", audit.Filter{Project: "a.b"}, ver, true, "bad filter"},
		{"a wildcard project", audit.Filter{Project: "*"}, ver, true, "bad filter"},
		{"a version without a stream", audit.Filter{Project: "demo"}, "v9", false, "is a mesh of protocol version v9 running?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := audit.List(ctx, js, tc.ver, tc.f)
			if err == nil || errors.Is(err, audit.ErrBadFilter) != tc.bad || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("List: %v; want an error saying %q (bad filter: %v)", err, tc.says, tc.bad)
			}
		})
	}
	for _, r := range []*audit.Record{rec("a.b", "main", "x", "", 0), rec("demo", "", "x", "", 0), rec("demo", "*", "x", "", 0)} {
		if err := p.Publish(ctx, ver, r); err == nil || !strings.Contains(err.Error(), "cynode audit subject") {
			t.Errorf("Publish of project %q channel %q: %v; want a subject error", r.ProjectID, r.ChannelID, err)
		}
	}
	if _, err := audit.Subject(ver, "demo", "main"); err != nil {
		t.Fatal(err)
	}
	if pat, err := audit.Pattern(ver, "demo"); err != nil || !strings.Contains(pat, ".demo.*.") {
		t.Fatalf("Pattern = %q, %v", pat, err)
	}
}

// More records than one fetch holds, published concurrently: every one
// is listed once.
func TestManyConcurrentRecords(t *testing.T) {
	p, js := start(t)
	ctx := context.Background()
	const n = 300
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 6 {
				r := rec("demo", fmt.Sprintf("ch%d", w), "db.task.get", "t1", i)
				if err := p.Publish(ctx, ver, r); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := audit.List(ctx, js, ver, audit.Filter{Project: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range got {
		if seen[r.ToolCallID] {
			t.Fatalf("%s listed twice", r.ToolCallID)
		}
		seen[r.ToolCallID] = true
	}
	if len(seen) != n {
		t.Fatalf("%d records listed; want %d", len(seen), n)
	}
}
