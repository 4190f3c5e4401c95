package mesh_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
	"github.com/utpmesh/utpmesh/subjects"
)

// startMeshes starts three meshes as one cluster named name, in this
// process (each on its own data directory, route port and server name,
// serving echo), with node adjusting node i's Config when set; they stop
// when the test ends.
func startMeshes(tb testing.TB, name string, node ...func(i int, c *mesh.Config)) []*mesh.Mesh {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	var routes, listen []string
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		listen = append(listen, l.Addr().String())
		routes = append(routes, "nats-route://"+l.Addr().String())
		l.Close()
	}
	meshes := make([]*mesh.Mesh, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		cfg := mesh.Config{DataDir: filepath.Join(dir, fmt.Sprintf("n%d", i)), Listen: "127.0.0.1:0",
			Logger: quiet, Tools: []worker.Tool{echo.Tool()},
			ServerName: fmt.Sprintf("n%d", i), Cluster: &embednats.Cluster{Name: name, Listen: listen[i], Routes: routes}}
		for _, f := range node {
			f(i, &cfg)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			meshes[i], errs[i] = mesh.Start(ctx, cfg)
		}()
	}
	wg.Wait()
	tb.Cleanup(func() {
		for _, m := range meshes {
			if m != nil {
				_ = m.Stop(context.Background())
			}
		}
	})
	for i, err := range errs {
		if err != nil {
			tb.Fatalf("node %d: %v", i, err)
		}
	}
	return meshes
}

// leadersApart lists the streams and consumers whose leader is not
// leader ("" when all follow it).
func leadersApart(js jetstream.JetStream, leader string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sl := js.ListStreams(ctx)
	for si := range sl.Info() {
		if si.Cluster == nil || si.Cluster.Leader != leader {
			return "stream " + si.Config.Name, nil
		}
		st, err := js.Stream(ctx, si.Config.Name)
		if err != nil {
			return "", err
		}
		cl := st.ListConsumers(ctx)
		for ci := range cl.Info() {
			if ci.Cluster == nil || ci.Cluster.Leader != leader {
				return "consumer " + si.Config.Name + "/" + ci.Name, nil
			}
		}
		if err := cl.Err(); err != nil {
			return "", err
		}
	}
	return "", sl.Err()
}

// TestClusterLeadersGather: on a 3-node cluster the node leading the
// command stream gathers the leaders of every other stream, bucket and
// consumer, and when the command stream's leadership moves to another
// node, the others follow it there.
func TestClusterLeadersGather(t *testing.T) {
	meshes := startMeshes(t, "leaders")
	nc, err := nats.Connect(meshes[0].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cmd := streams.CommandStream(subjects.DefaultVersion)
	cmdLeader := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, cmd)
		if err != nil || st.CachedInfo().Cluster == nil {
			return ""
		}
		return st.CachedInfo().Cluster.Leader
	}
	gathered := func(what string) string {
		t.Helper()
		var last string
		for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			l := cmdLeader()
			if l == "" {
				continue
			}
			apart, err := leadersApart(js, l)
			if err == nil && apart == "" {
				return l
			}
			last = fmt.Sprintf("%s led by another node than %s (err %v)", apart, l, err)
		}
		t.Fatalf("%s: leaders not gathered: %s", what, last)
		return ""
	}
	first := gathered("after start")

	// Hand the command stream to another node: the rest follows.
	other := "n0"
	if first == other {
		other = "n1"
	}
	body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": other}})
	for end := time.Now().Add(time.Minute); cmdLeader() != other; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the command stream's leadership did not move to %s", other)
		}
		if _, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+cmd, body, 5*time.Second); err != nil {
			t.Logf("step down: %v", err)
		}
	}
	if got := gathered("after the command stream moved"); got != other {
		t.Fatalf("leaders gathered on %s, want %s", got, other)
	}
}
