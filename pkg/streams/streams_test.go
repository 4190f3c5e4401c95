package streams_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/jskv/jskvtest"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/streams"
)

const ver = "v1r3"

func TestEnsureCreatesAndMigrates(t *testing.T) {
	ctx := context.Background()
	js, err := jetstream.New(meshtest.Conn(t, meshtest.NATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	// A command stream made by an older version captured every command,
	// wakeups included.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: streams.CommandStream(ver), Subjects: []string{"cg." + ver + ".*.*.cmd.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "cg."+ver+".p.c.cmd.agent.a.wakeup", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(ctx, js, ver); err != nil {
		t.Fatalf("Ensure over an older command stream: %v", err)
	}
	want := map[string][]string{
		streams.CommandStream(ver): {"cg." + ver + ".*.*.cmd.tool.>", "cg." + ver + ".*.*.cmd.sys.>"},
		streams.WakeupStream(ver):  {"cg." + ver + ".*.*.cmd.agent.>"},
		streams.EventStream(ver):   {"cg." + ver + ".*.*.evt.>"},
	}
	for name, subj := range want {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.Subjects; !slices.Equal(got, subj) {
			t.Errorf("%s subjects = %v, want %v", name, got, subj)
		}
		if r := st.CachedInfo().Config.Replicas; r != 1 {
			t.Errorf("%s replicas = %d, want 1", name, r)
		}
	}
	// New wakeups go to the wakeup stream; the old one stays where it was.
	ack, err := js.Publish(ctx, "cg."+ver+".p.c.cmd.agent.a.wakeup", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stream != streams.WakeupStream(ver) {
		t.Fatalf("a wakeup is stored by %s, want %s", ack.Stream, streams.WakeupStream(ver))
	}
	// Idempotent.
	if err := streams.Ensure(ctx, js, ver); err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(ctx, js, ver, streams.WithReplicas(0)); err == nil {
		t.Fatal("WithReplicas(0) accepted")
	}
	if err := streams.Ensure(ctx, js, ver, streams.WithReplicas(3)); err == nil {
		t.Fatal("3 replicas on a single server accepted")
	}
}

// TestEnsureKeepsReplicas: in a cluster the mesh makes R3 streams; a worker
// that calls Ensure without WithReplicas must not shrink them.
func TestEnsureKeepsReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	ctx := context.Background()
	c := jskvtest.Start(t)
	if err := streams.Ensure(ctx, c.JetStream(t, 0), ver, streams.WithReplicas(3)); err != nil {
		t.Fatal(err)
	}
	js := c.JetStream(t, 1)
	if err := streams.Ensure(ctx, js, ver); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{streams.CommandStream(ver), streams.WakeupStream(ver), streams.EventStream(ver)} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := st.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("%s has %d replicas after a plain Ensure, want 3", name, r)
		}
	}
}

// TestNarrower: a durable's filters narrower than a worker's (the one the
// core made for a worker limited to projects) are bound, not replaced.
func TestNarrower(t *testing.T) {
	all := []string{"cg.v1.*.*.cmd.tool.echo"}
	tests := []struct {
		have, want []string
		narrower   bool
	}{
		{[]string{"cg.v1.demo.*.cmd.tool.echo"}, all, true},
		{[]string{"cg.v1.demo.*.cmd.tool.echo", "cg.v1.ops.*.cmd.tool.echo"}, all, true},
		{all, all, false},
		{[]string{"cg.v1.demo.*.cmd.tool.other"}, all, false},
		{[]string{"cg.v1.*.*.cmd.tool.>"}, all, false},
		{[]string{"cg.v1.demo.*.cmd.tool.echo.x"}, all, false},
		{[]string{"cg.v1.demo.main.cmd.tool.echo"}, []string{"cg.v1.>"}, true},
		{nil, all, false},
	}
	for _, tc := range tests {
		if got := streams.Narrower(tc.have, tc.want); got != tc.narrower {
			t.Errorf("Narrower(%v, %v) = %v, want %v", tc.have, tc.want, got, tc.narrower)
		}
	}
}

func TestAgentWakeupConsumer(t *testing.T) {
	seen := map[string]string{}
	for _, tc := range []struct{ project, agent, prefix string }{
		{"demo", "alice", "agent_alice_"},
		{"demo", "", "project_demo_"},
		{"other", "alice", "agent_alice_"},
		{"other", "", "project_other_"},
		// Underscores in the tokens do not make two names one.
		{"a_b", "c", "agent_c_"},
		{"a", "b_c", "agent_b_c_"},
		{"a", "b", "agent_b_"},
		{"a_b", "", "project_a_b_"},
	} {
		name := streams.AgentWakeupConsumer(tc.project, tc.agent)
		if name != streams.AgentWakeupConsumer(tc.project, tc.agent) {
			t.Fatalf("%s/%s: not deterministic", tc.project, tc.agent)
		}
		if !strings.HasPrefix(name, tc.prefix) || len(name) != len(tc.prefix)+8 || strings.ContainsAny(name, ".*> /\\") {
			t.Errorf("AgentWakeupConsumer(%q, %q) = %q, want %s + 8 hex digits", tc.project, tc.agent, name, tc.prefix)
		}
		key := tc.project + "/" + tc.agent
		if prev, ok := seen[name]; ok {
			t.Errorf("%s and %s share the durable %s", prev, key, name)
		}
		seen[name] = key
	}
}

// TestEnsureAsyncPersist: WithAsyncPersist makes the command and wakeup
// streams async and leaves the event stream alone; Ensure without it keeps
// them async; a stream made before keeps its persist mode (JetStream
// cannot change it) and says so; replicas above one are refused.
func TestEnsureAsyncPersist(t *testing.T) {
	ctx := context.Background()
	mode := func(js jetstream.JetStream, name string) jetstream.PersistModeType {
		t.Helper()
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config.PersistMode
	}
	js, err := jetstream.New(meshtest.Conn(t, meshtest.NATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	var logged []string
	logf := func(msg string, args ...any) { logged = append(logged, msg) }
	if err := streams.Ensure(ctx, js, ver, streams.WithAsyncPersist(logf)); err != nil {
		t.Fatal(err)
	}
	want := map[string]jetstream.PersistModeType{
		streams.CommandStream(ver): jetstream.AsyncPersistMode,
		streams.WakeupStream(ver):  jetstream.AsyncPersistMode,
		streams.EventStream(ver):   jetstream.DefaultPersistMode,
	}
	for _, opts := range [][]streams.Option{nil, {streams.WithAsyncPersist(logf)}} {
		if err := streams.Ensure(ctx, js, ver, opts...); err != nil {
			t.Fatalf("Ensure again (%d options): %v", len(opts), err)
		}
		for name, m := range want {
			if got := mode(js, name); got != m {
				t.Errorf("%s persist mode = %v, want %v", name, got, m)
			}
		}
	}
	if len(logged) != 0 {
		t.Errorf("logged %q for streams that are async already", logged)
	}

	// Streams made before: they stay, and the option says so.
	old, err := jetstream.New(meshtest.Conn(t, meshtest.NATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(ctx, old, ver); err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(ctx, old, ver, streams.WithAsyncPersist(logf)); err != nil {
		t.Fatalf("WithAsyncPersist over streams made before: %v", err)
	}
	for _, name := range []string{streams.CommandStream(ver), streams.WakeupStream(ver)} {
		if got := mode(old, name); got != jetstream.DefaultPersistMode {
			t.Errorf("%s made before: persist mode = %v, want it kept", name, got)
		}
	}
	if len(logged) != 2 || !strings.Contains(logged[0], "made before async persistence") {
		t.Errorf("logged %q, want one line per stream that keeps fsyncing", logged)
	}

	fresh, err := jetstream.New(meshtest.Conn(t, meshtest.NATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	err = streams.Ensure(ctx, fresh, ver, streams.WithAsyncPersist(logf), streams.WithReplicas(3))
	if !errors.Is(err, streams.ErrInvalid) || !strings.Contains(err.Error(), "single server") {
		t.Fatalf("WithAsyncPersist with 3 replicas = %v, want ErrInvalid naming the single server", err)
	}
}
