package retention_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/retention"
)

// markerBuckets makes two KV buckets as the catalogues' state and the
// inbox use them (one revision per key), each with live keys and deleted
// ones, and returns the connection's JetStream.
func markerBuckets(t *testing.T) (jetstream.JetStream, *retention.MarkerConfig) {
	t.Helper()
	nc := meshtest.Conn(t, meshtest.NATS(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, bucket := range []string{"atlas_tasks", "utpmesh_inbox"} {
		kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1, Storage: jetstream.FileStorage})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"demo.live.1", "demo.live.2", "demo.gone.1", "demo.gone.2", "demo.gone.3"} {
			if _, err := kv.Put(ctx, k, []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range []string{"demo.gone.1", "demo.gone.2", "demo.gone.3"} {
			if err := kv.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	return js, &retention.MarkerConfig{NC: nc, Buckets: []string{"atlas_tasks", "atlas_notes", "utpmesh_inbox"}}
}

// stored lists the keys that have a message in bucket's stream.
func stored(t *testing.T, js jetstream.JetStream, bucket string) []string {
	t.Helper()
	s, err := js.Stream(t.Context(), "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter("$KV."+bucket+".>"))
	if err != nil {
		t.Fatal(err)
	}
	out := slices.Collect(maps.Keys(info.State.Subjects))
	for i := range out {
		out[i] = out[i][len("$KV."+bucket+"."):]
	}
	slices.Sort(out)
	return out
}

// TestMarkersPurged: the core's purge removes the delete markers older
// than its limit from every bucket it is given, keeps the live keys and
// younger markers, and reports a bucket that does not exist.
func TestMarkersPurged(t *testing.T) {
	js, cfg := markerBuckets(t)
	now := time.Now()
	cfg.Clock = func() time.Time { return now }
	cfg.Logger = quiet
	p, err := retention.NewMarkerPurger(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	all := []string{"demo.gone.1", "demo.gone.2", "demo.gone.3", "demo.live.1", "demo.live.2"}
	live := []string{"demo.live.1", "demo.live.2"}

	// Markers younger than an hour (the default) stay.
	rs := p.Purge(t.Context())
	want := []retention.MarkerReport{{Bucket: "atlas_tasks"}, {Bucket: "atlas_notes", Missing: true}, {Bucket: "utpmesh_inbox"}}
	if !slices.Equal(rs, want) {
		t.Fatalf("reports of a purge of young markers = %+v, want %+v", rs, want)
	}
	for _, b := range []string{"atlas_tasks", "utpmesh_inbox"} {
		if got := stored(t, js, b); !slices.Equal(got, all) {
			t.Fatalf("%s after a purge of young markers = %v, want %v", b, got, all)
		}
	}

	// Two hours later they are old: they go, the live keys stay.
	now = now.Add(2 * time.Hour)
	rs = p.Purge(t.Context())
	want = []retention.MarkerReport{{Bucket: "atlas_tasks", Purged: 3}, {Bucket: "atlas_notes", Missing: true}, {Bucket: "utpmesh_inbox", Purged: 3}}
	if !slices.Equal(rs, want) {
		t.Fatalf("reports = %+v, want %+v", rs, want)
	}
	for _, b := range []string{"atlas_tasks", "utpmesh_inbox"} {
		if got := stored(t, js, b); !slices.Equal(got, live) {
			t.Fatalf("%s after the purge = %v, want %v", b, got, live)
		}
		kv, err := js.KeyValue(t.Context(), b)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range live {
			if e, err := kv.Get(t.Context(), k); err != nil || string(e.Value()) != "v" || e.Revision() == 0 {
				t.Fatalf("%s %s after the purge = %v, %v", b, k, e, err)
			}
		}
	}
}

// logged is a slog handler that passes every record's message on.
type logged chan string

func (l logged) Enabled(context.Context, slog.Level) bool { return true }
func (l logged) Handle(_ context.Context, r slog.Record) error {
	l <- r.Message
	return nil
}
func (l logged) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logged) WithGroup(string) slog.Handler      { return l }

// TestMarkerPurgerStart: Start purges at once (and logs it), Stop ends
// the loop.
func TestMarkerPurgerStart(t *testing.T) {
	js, cfg := markerBuckets(t)
	cfg.Buckets = []string{"atlas_tasks"}
	cfg.Clock = func() time.Time { return time.Now().Add(2 * time.Hour) }
	msgs := make(logged, 16)
	cfg.Logger = slog.New(msgs)
	p, err := retention.NewMarkerPurger(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	select {
	case m := <-msgs:
		if m != "retention: delete markers purged" {
			t.Fatalf("logged %q, want the purge", m)
		}
	case <-t.Context().Done():
		t.Fatal("no purge logged")
	}
	p.Stop()
	p.Stop() // idempotent
	if got, want := stored(t, js, "atlas_tasks"), []string{"demo.live.1", "demo.live.2"}; !slices.Equal(got, want) {
		t.Fatalf("atlas_tasks after Start = %v, want %v", got, want)
	}
}

// TestMarkerConfigRefused: a configuration without the core's connection
// or with a negative duration is refused, naming the field.
func TestMarkerConfigRefused(t *testing.T) {
	nc := meshtest.Conn(t, meshtest.NATS(t))
	for _, tc := range []struct {
		name string
		cfg  retention.MarkerConfig
		want string
	}{
		{"no connection", retention.MarkerConfig{}, "needs NC"},
		{"negative age", retention.MarkerConfig{NC: nc, OlderThan: -time.Second}, "MarkerConfig.OlderThan -1s is negative"},
		{"negative interval", retention.MarkerConfig{NC: nc, Interval: -time.Second}, "MarkerConfig.Interval -1s is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := retention.NewMarkerPurger(tc.cfg)
			if !errors.Is(err, retention.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewMarkerPurger = %v, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
}
