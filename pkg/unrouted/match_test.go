package unrouted

import (
	"testing"

	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/subjects"
)

func TestRoutingRules(t *testing.T) {
	es := []*registry.Entry{
		{ToolName: "ATLAS_TASK_CREATE", TargetSubject: "cg.{ver}.{project_id}.{channel_id}.cmd.tool.atlas.TASK_CREATE"},
		{ToolName: "echo", TargetSubject: "cg.{ver}.{project_id}.{channel_id}.cmd.tool.echo"},
		{ToolName: "only_other", TargetSubject: "cg.{ver}.other.{channel_id}.cmd.tool.only_other"},
	}
	tests := []struct {
		subject    string
		registered bool
		consumed   bool
	}{
		{"cg.v1r3.demo.main.cmd.tool.atlas.TASK_CREATE", true, false},
		{"cg.v1r3.demo.main.cmd.tool.atlas.TASK_CREATE.x", false, false}, // a target serves its subject only
		{"cg.v1r3.demo.main.cmd.tool.tree", false, false},                // tree.> needs one more token
		{"cg.v1r3.demo.main.cmd.tool.tree.a.b", false, true},
		{"cg.v1r3.demo.main.cmd.tool.one.x", false, true},
		{"cg.v1r3.demo.main.cmd.tool.one.x.y", false, false},
		{"cg.v1r3.demo.main.cmd.tool.atlas.NOSUCH", false, false},
		{"cg.v1r3.demo.main.cmd.tool.atlas", false, false},
		{"cg.v1r3.demo.main.cmd.tool.echo", true, true},
		{"cg.v1r3.demo.main.cmd.tool.echo.sub", false, false},
		{"cg.v1r3.demo.main.cmd.tool.only_other", false, false},
		{"cg.v1r3.demo.main.cmd.tool.ech0", false, false},
	}
	filters := []string{"cg.v1r3.*.*.cmd.tool.echo", "cg.v1r3.*.*.cmd.tool.tree.>", "cg.v1r3.*.*.cmd.tool.one.*", "cg.v1r3.other.*.cmd.tool.>"}
	for _, tc := range tests {
		t.Run(tc.subject, func(t *testing.T) {
			sub, err := subjects.Parse(tc.subject)
			if err != nil {
				t.Fatal(err)
			}
			if got := registered(es, sub); got != tc.registered {
				t.Errorf("registered = %v, want %v", got, tc.registered)
			}
			if got := matchesAny(filters, tc.subject); got != tc.consumed {
				t.Errorf("consumed = %v, want %v", got, tc.consumed)
			}
		})
	}
	sub, _ := subjects.Parse("cg.v1r3.demo.main.cmd.tool.ech0")
	if near := nearest(es, sub); len(near) != 2 || near[0] != "echo" {
		t.Fatalf("nearest = %v, want echo first (only_other is another project's)", near)
	}
}
