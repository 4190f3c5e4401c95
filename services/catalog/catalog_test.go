package catalog_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/utpmesh/utpmesh/services/catalog"
)

// recordHandler sends every log record to a channel.
type recordHandler struct {
	attrs []slog.Attr
	out   chan<- slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.out <- r
	return nil
}

func (h *recordHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordHandler{attrs: append(append([]slog.Attr(nil), h.attrs...), as...), out: h.out}
}

func (h *recordHandler) WithGroup(string) slog.Handler { return h }

// TestAbortedStartIsQuiet: services built before a mesh that never starts
// (their context ends before Late.Set) stop without an error line, and
// log to the logger they were given, not slog's default.
func TestAbortedStartIsQuiet(t *testing.T) {
	records := make(chan slog.Record, 64)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := catalog.Build([]string{"atlas.calendar"}, catalog.Deps{DataDir: t.TempDir(), Context: ctx,
		Late: catalog.NewLate(), Logger: slog.New(&recordHandler{out: records})})
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the mesh did not start
	for r := range records {
		if r.Level >= slog.LevelWarn {
			t.Fatalf("aborted start logged %s %q", r.Level, r.Message)
		}
		service := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "service" {
				service = a.Value.String()
			}
			return true
		})
		if service != "atlas.calendar" {
			t.Fatalf("record %q lacks service=atlas.calendar (not the given logger?)", r.Message)
		}
		if r.Message == "confirmation endpoint not started: the service stopped before the mesh was up" {
			return
		}
	}
}

func TestKeepFiles(t *testing.T) {
	tests := []struct {
		names []string
		want  bool
	}{
		{[]string{"echo"}, false},
		{[]string{"echo", "atlas.tasks"}, true},
		{[]string{"atlas.utility"}, true},
		{nil, false},
	}
	for _, tc := range tests {
		if got := catalog.KeepFiles(tc.names); got != tc.want {
			t.Errorf("KeepFiles(%v) = %v, want %v", tc.names, got, tc.want)
		}
	}
}

// TestBuckets: the core purges the delete markers of every catalogue's
// state bucket: the five ATLAS groups', ATP's and CyNodeAI's.
func TestBuckets(t *testing.T) {
	want := []string{"atlas_calendar", "atlas_notes", "atlas_tasks", "atlas_utility", "atlas_workflows", "atp_state", "cynode_state"}
	if got := catalog.Buckets(); !slices.Equal(got, want) {
		t.Fatalf("Buckets() = %v, want %v", got, want)
	}
}
