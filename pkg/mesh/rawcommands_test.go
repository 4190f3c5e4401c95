package mesh_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
)

// TestRawCommandsFollowConfig: an agent identity may not publish a raw
// tool command until its project's authz config opts in (policy config
// --commands raw, through the authz service); the opt-in and its
// withdrawal reach the agent's NATS permissions live, without a restart.
func TestRawCommandsFollowConfig(t *testing.T) {
	e := startAdmissionMesh(t)
	ctx := ctxFor(t)
	agentNC := e.connect(t, "agent-"+admProject)
	raw := "cg." + e.ver + "." + admProject + "." + admChannel + ".cmd.tool.probe"
	// published reports whether a raw publish got through. The server
	// answers a refused publish with -ERR before the flush's PONG, and the
	// client's read loop records it as the connection's last error before
	// the flush returns: a new last error means refused.
	published := func() bool {
		t.Helper()
		before := agentNC.LastError()
		if err := agentNC.Publish(raw, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if err := agentNC.FlushTimeout(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		after := agentNC.LastError()
		if after == before {
			return true
		}
		if !errors.Is(after, nats.ErrPermissionViolation) {
			t.Fatalf("publish: %v", after)
		}
		return false
	}
	waitFor := func(what string, want bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); published() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting: %s", what)
			}
		}
	}
	if published() {
		t.Fatal("an agent published a raw tool command in a project that did not opt in")
	}
	cl, err := natsauthz.NewClient(e.connect(t, "admin"), e.ver)
	if err != nil {
		t.Fatal(err)
	}
	put := func(mode authz.CommandsMode) {
		t.Helper()
		cur, err := cl.Config(ctx, admProject)
		if err != nil {
			t.Fatal(err)
		}
		cur.Commands = mode
		if err := cl.PutConfig(ctx, admProject, cur); err != nil {
			t.Fatal(err)
		}
	}
	put(authz.CommandsRaw)
	waitFor("raw commands allowed after the opt-in", true)
	put(authz.CommandsAdmitted)
	waitFor("raw commands refused after the opt-in is withdrawn", false)
}
