package mesh_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestAgentDurables: the core makes every agent identity's wakeup
// durable as a pull consumer with the identity's filter
// (meshauth.AgentDurables), for the identities of the start and those
// added later; a durable of that name with another filter is set back to
// the identity's, and a push consumer in its place is refused with what to
// delete.
func TestAgentDurables(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quiet, Projects: []string{"demo"},
		Identities: &mesh.IdentityConfig{Workers: []meshauth.Identity{{Role: meshauth.RoleAgent, Project: "demo", Agent: "alice"}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	js, _ := jetstream.New(m.Conn())
	v := subjects.DefaultVersion
	wake := streams.WakeupStream(v)
	filterOf := func(name string) string {
		t.Helper()
		c, err := js.Consumer(ctx, wake, name)
		if err != nil {
			t.Fatalf("durable %s: %v", name, err)
		}
		cfg := c.CachedInfo().Config
		if cfg.DeliverSubject != "" || cfg.AckWait != streams.WakeupAckWait {
			t.Fatalf("durable %s: deliver %q, ack wait %v; want a pull consumer, %v", name, cfg.DeliverSubject, cfg.AckWait, streams.WakeupAckWait)
		}
		return cfg.FilterSubject
	}
	for name, want := range map[string]string{
		streams.AgentWakeupConsumer("demo", "alice"): "cg." + v + ".demo.*.cmd.agent.alice.wakeup",
		streams.AgentWakeupConsumer("demo", ""):      "cg." + v + ".demo.*.cmd.agent.*.wakeup",
	} {
		if got := filterOf(name); got != want {
			t.Errorf("durable %s filters %q, want %q", name, got, want)
		}
	}

	// dave's name taken with carol's filter: set back to dave's.
	dave := streams.AgentWakeupConsumer("demo", "dave")
	if _, err := js.CreateOrUpdateConsumer(ctx, wake, streams.ConsumerConfig(dave, []string{"cg." + v + ".demo.*.cmd.agent.carol.wakeup"}, streams.WakeupAckWait, -1)); err != nil {
		t.Fatal(err)
	}
	if err := m.AddIdentities(meshauth.Identity{Role: meshauth.RoleAgent, Project: "demo", Agent: "dave"}); err != nil {
		t.Fatal(err)
	}
	if got := filterOf(dave); got != "cg."+v+".demo.*.cmd.agent.dave.wakeup" {
		t.Fatalf("dave's durable filters %q after AddIdentities, want his own", got)
	}

	// erin's name taken by a push consumer: refused, naming it.
	erin := streams.AgentWakeupConsumer("demo", "erin")
	cfg := streams.ConsumerConfig(erin, []string{"cg." + v + ".demo.*.cmd.agent.erin.wakeup"}, streams.WakeupAckWait, -1)
	cfg.DeliverSubject = "elsewhere"
	if _, err := js.CreateOrUpdateConsumer(ctx, wake, cfg); err != nil {
		t.Fatal(err)
	}
	err = m.AddIdentities(meshauth.Identity{Role: meshauth.RoleAgent, Project: "demo", Agent: "erin"})
	if err == nil || !strings.Contains(err.Error(), "push consumer") || !strings.Contains(err.Error(), "nats consumer rm "+wake+" "+erin) {
		t.Fatalf("AddIdentities over a push consumer = %v, want refused with what to delete", err)
	}
}
