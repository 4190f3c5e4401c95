package mesh_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cedar-policy/cedar-go/types"
	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/admit"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestClusterAdmission: on a 3-node cluster with the gate on, every node
// adds its admission key to the replicated key set, every node's
// svc.dispatch.keys answers all three, a worker on one node verifies what
// another node's key signed, and calls admitted by any node run on the
// workers of the others (node 0 serves no probe).
func TestClusterAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	ctx := context.Background()
	dir := t.TempDir()
	keys := filepath.Join(dir, "issuer-keys") // the nodes share the issuer keys (mesh.ReplicatedConfig)
	meshes := startMeshes(t, "admit", func(i int, c *mesh.Config) {
		c.Tools, c.Auth = nil, &mesh.AuthConfig{KeyDir: keys}
		if i > 0 { // node 0 serves no probe
			c.Tools = []worker.Tool{probeTool("probe", registry.Options{})}
		}
	})
	m0 := meshes[0]
	if _, err := authz.SetupDemo(ctx, m0.Auth().Store, m0.Auth().Keys, []string{admProject},
		[]types.EntityUID{types.NewEntityUID(authz.DefaultActionType, "probe")}, m0.Config().DataDir, time.Now()); err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(m0.Config().DataDir, authz.DemoMandateFile))
	if err != nil {
		t.Fatal(err)
	}

	want := map[string]bool{}
	for _, m := range meshes {
		want[m.Admission().KeyID()] = true
	}
	ks, _ := subjects.DispatchKeys(m0.Config().ProtocolVersion, admProject, admChannel)
	for i, m := range meshes {
		var reply utp.AdmissionKeysReply
		if err := svc.Call(ctx, m.Conn(), ks.String(), nil, struct{}{}, &reply); err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, k := range reply.Keys {
			got[k.KeyID] = true
		}
		if len(got) != 3 || !got[meshes[0].Admission().KeyID()] || !got[meshes[1].Admission().KeyID()] || !got[meshes[2].Admission().KeyID()] {
			t.Fatalf("keys asked through node %d = %v, want the 3 nodes' %v", i, got, want)
		}
	}
	// A worker connected to node 2 verifies what node 0's key signed.
	k0, err := admit.LoadOrCreateKey(m0.Config().DataDir)
	if err != nil {
		t.Fatal(err)
	}
	cmd := &utp.Command{AgentID: admAgent, AgentTurnID: "t", ToolCallID: "c", ToolCallCardID: card.NewID(), AfterExecution: card.Suspend}
	subj, err := subjects.Parse("cg." + m0.Config().ProtocolVersion + "." + admProject + "." + admChannel + ".cmd.tool.probe")
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := k0.Sign(utp.Admission{Subject: subj.String(), AgentID: cmd.AgentID, AgentTurnID: "t", ToolCallID: "c", ToolCallCardID: cmd.ToolCallCardID, AfterExecution: card.Suspend})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.NewAdmissionVerifier(meshes[2].Conn(), quiet).Verify(ctx, subj, hdr, cmd); err != nil {
		t.Fatalf("node 2's verifier on node 0's admission: %v", err)
	}

	// Calls through node 0 (whichever node admits them) run on nodes 1
	// and 2, which verify them.
	nc, err := nats.Connect(m0.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := agentOn(t, nc, strings.TrimSpace(string(tok)), false)
	for i := range 6 {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		out, err := c.Call(cctx, agent.CallRequest{ToolName: "probe", AgentTurnID: "turn-cluster", ToolCallID: fmt.Sprintf("c-%d", i)})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if out.Result.Status != card.StatusSuccess || !strings.Contains(string(out.Result.Result), `"admitted":true`) {
			t.Fatalf("call %d: %s %s %+v", i, out.Result.Status, out.Result.Result, out.Result.Error)
		}
	}
}
