package subjects_test

import (
	"errors"
	"testing"

	"github.com/utpmesh/utpmesh/subjects"
)

func TestNodeService(t *testing.T) {
	tests := []struct {
		name, node, want, err string
	}{
		{"plain", "vm-1_a", "cg.v1r3.demo.main.svc.cynode.node.vm-1_a", ""},
		{"dot", "vm.example", "", "node"},
		{"wildcard", "*", "", "node"},
		{"empty", "", "", "node"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := subjects.NodeService("v1r3", "demo", "main", "cynode", tc.node)
			if tc.err == "" {
				if err != nil || got != tc.want {
					t.Fatalf("NodeService = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			var te *subjects.TokenError
			if !errors.As(err, &te) || te.Role != tc.err {
				t.Fatalf("NodeService(%q) = %q, %v; want a TokenError of role %s", tc.node, got, err, tc.err)
			}
		})
	}
	for node, want := range map[string]string{"*": "cg.v1r3.*.*.svc.cynode.node.*", "n1": "cg.v1r3.*.*.svc.cynode.node.n1"} {
		if got, err := subjects.NodeServicePattern("v1r3", "cynode", node); err != nil || got != want {
			t.Errorf("NodeServicePattern(%q) = %q, %v; want %q", node, got, err, want)
		}
	}
	if _, err := subjects.NodeServicePattern("v1r3", "cynode", "a.b"); err == nil {
		t.Error("NodeServicePattern accepted node a.b")
	}
}
