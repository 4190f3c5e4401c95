package inbox_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentSideDependencies: the contract and the agent's client are what
// the agent SDK imports, so they depend on nats.go (and its own imports)
// and the mesh's protocol packages only — never on bbolt, a JetStream
// server, OpenTelemetry or the inbox service.
func TestAgentSideDependencies(t *testing.T) {
	const mod = "github.com/utpmesh/utpmesh/"
	allowedMod := map[string]bool{
		"subjects": true, "pkg/card": true, "pkg/utp": true, "pkg/svc": true, "pkg/streams": true,
		"pkg/inbox": true, "pkg/inbox/natsinbox": true,
	}
	allowedExt := []string{
		"github.com/nats-io/nats.go", "github.com/nats-io/nkeys", "github.com/nats-io/nuid",
		"github.com/klauspost/compress", "github.com/google/uuid", "golang.org/x/crypto", "golang.org/x/sys",
		"golang.org/x/text", "golang.org/x/net", "vendor/",
	}
	for _, pkg := range []string{mod + "pkg/inbox", mod + "pkg/inbox/natsinbox"} {
		t.Run(strings.TrimPrefix(pkg, mod), func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", pkg).Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", pkg, err)
			}
			for _, dep := range strings.Fields(string(out)) {
				first, _, _ := strings.Cut(dep, "/")
				switch {
				case !strings.Contains(first, ".") && first != "vendor": // the standard library
				case strings.HasPrefix(dep, mod):
					if !allowedMod[strings.TrimPrefix(dep, mod)] {
						t.Errorf("%s depends on %s", pkg, dep)
					}
				default:
					ok := false
					for _, a := range allowedExt {
						ok = ok || dep == a || strings.HasPrefix(dep, strings.TrimSuffix(a, "/")+"/")
					}
					if !ok {
						t.Errorf("%s depends on %s", pkg, dep)
					}
				}
			}
		})
	}
}
