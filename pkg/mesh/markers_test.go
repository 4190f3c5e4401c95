package mesh_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/inbox/kvinbox"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/retention"
)

// TestMeshPurgesMarkers: a mesh purges the old delete markers of the
// buckets it is given (a catalogue's state bucket, made here as the
// catalogue's Provision would) and of its own inbox bucket, with its own
// connection, and leaves the live keys.
func TestMeshPurgesMarkers(t *testing.T) {
	ctx := context.Background()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quiet,
		Replicated: &mesh.ReplicatedConfig{Replicas: 1},
		Markers: retention.MarkerConfig{Buckets: []string{"svc_state"},
			Clock: func() time.Time { return time.Now().Add(2 * time.Hour) }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	js, err := jetstream.New(m.Conn())
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "svc_state", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"demo.a", "demo.b"} {
		if _, err := kv.Put(ctx, k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "demo.b"); err != nil {
		t.Fatal(err)
	}
	rs := m.Markers().Purge(ctx)
	var buckets []string
	for _, r := range rs {
		if r.Err != "" || r.Missing {
			t.Errorf("report %+v", r)
		}
		buckets = append(buckets, r.Bucket)
	}
	if want := []string{"svc_state", kvinbox.DefaultBucket}; !slices.Equal(buckets, want) {
		t.Fatalf("purged buckets %v, want %v", buckets, want)
	}
	s, err := js.Stream(ctx, "KV_svc_state")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("$KV.svc_state.>"))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) != 1 || info.State.Subjects["$KV.svc_state.demo.a"] != 1 {
		t.Fatalf("stored keys after the purge: %v, want demo.a alone", info.State.Subjects)
	}
}
