package natsauthz_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// regionCatalogue declares the context attribute region, as a catalogue
// served by the mesh process (and not by an external worker) would.
type regionCatalogue struct{}

func (regionCatalogue) Name() string { return "region-fixture" }
func (regionCatalogue) Schema() authz.SchemaFragment {
	return authz.SchemaFragment{Context: []string{"region"}}
}
func (regionCatalogue) ResolveResource(context.Context, authz.ResourceRequest) (*authz.Resource, error) {
	return nil, nil
}

// TestRemoteGateFailsClosed: the mesh knows the context attribute region
// (its catalogue is registered there) and the project forbids calls when
// it is "eu"; a remote gate in a process that registers no catalogue
// cannot evaluate that forbid, and denies the call (auth_failed, naming
// the policy and the attribute) instead of skipping the forbid and
// allowing it.
func TestRemoteGateFailsClosed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	entry := toolEntry("echo", "")
	srv, s, _ := startService(ctx, t, []*registry.Entry{entry})

	authz.RegisterCatalogue(regionCatalogue{})
	_, err := s.Store.PutPolicies(ctx, "demo", `@id("echo") permit(principal, action == Action::"echo", resource);
@id("no-eu") forbid(principal, action, resource) when { context.region == "eu" };`)
	authz.UnregisterCatalogue(regionCatalogue{}.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Store.PutConfig(ctx, "demo", authz.ProjectConfig{Mandate: authz.MandateNotRequired}); err != nil {
		t.Fatal(err)
	}

	g, err := natsauthz.NewRemoteGate(meshtest.Conn(t, srv), natsauthz.RemoteConfig{})
	if err != nil {
		t.Fatal(err)
	}
	call := &worker.Call{ProjectID: "demo", ChannelID: "c1", ToolName: "echo", Entry: entry,
		Command: utp.Command{AgentID: "agent-1", ToolCallID: "tc-1"}, Arguments: json.RawMessage(`{}`)}
	err = g.Authorize(ctx, call)
	var ce *card.Error
	if !errors.As(err, &ce) || ce.Code != card.CodeAuthFailed ||
		!strings.Contains(ce.Message, "forbid policy no-eu (line 2): unknown attribute context.region") ||
		!strings.Contains(ce.Message, "fail closed") {
		t.Fatalf("remote gate = %v; want auth_failed naming forbid policy no-eu and context.region", err)
	}
	var detail authz.AuthFailedDetail
	if err := json.Unmarshal(ce.Detail, &detail); err != nil {
		t.Fatal(err)
	}
	if detail.Reason != authz.ReasonProjectPolicy || !slices.Contains(detail.Policies, "project:no-eu") {
		t.Fatalf("detail = %+v; want reason %s naming project:no-eu", detail, authz.ReasonProjectPolicy)
	}
}
