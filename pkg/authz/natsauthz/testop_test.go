package natsauthz_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
)

// argResolver resolves a call's resource from its booking_object_id
// argument, so a decision shows which arguments the gate was given.
type argResolver struct{}

func (argResolver) ResolveResource(_ context.Context, in authz.ResourceRequest) (*authz.Resource, error) {
	var args map[string]string
	if err := json.Unmarshal(in.Arguments, &args); err != nil {
		return nil, err
	}
	if id := args["booking_object_id"]; id != "" {
		return &authz.Resource{ID: id, State: args["hem_id"]}, nil
	}
	return nil, nil
}

// TestTestOpArguments: the test operation routes a generic arguments
// object to the catalogues' resolvers; the older top-level
// booking_object_id and hem_id are aliases used when arguments does not
// set the same name.
func TestTestOpArguments(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, s, _ := startService(ctx, t, nil, argResolver{})
	if err := s.Store.PutConfig(ctx, "demo", authz.ProjectConfig{Mandate: authz.MandateNotRequired}); err != nil {
		t.Fatal(err)
	}
	cl, err := natsauthz.NewClient(meshtest.Conn(t, srv), "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name            string
		req             natsauthz.TestRequest
		resource, state string
	}{
		{"arguments", natsauthz.TestRequest{Arguments: map[string]any{"booking_object_id": "b1", "hem_id": "h1"}}, "b1", "h1"},
		{"legacy aliases", natsauthz.TestRequest{LegacyResource: "b2", LegacyEnumerated: "h2"}, "b2", "h2"},
		{"arguments win over aliases", natsauthz.TestRequest{Arguments: map[string]any{"booking_object_id": "b3"}, LegacyResource: "old", LegacyEnumerated: "h3"}, "b3", "h3"},
		{"none", natsauthz.TestRequest{}, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.AgentID, tc.req.Action = "agent-1", `Action::"echo"`
			d, err := cl.Test(ctx, "demo", tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if d.ResourceID != tc.resource || d.ResourceState != tc.state {
				t.Fatalf("decision resource %q state %q, want %q %q", d.ResourceID, d.ResourceState, tc.resource, tc.state)
			}
		})
	}
}
