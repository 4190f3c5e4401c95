package artifact_test

import (
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/services/cynode/artifact"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
)

// FuzzPut feeds arbitrary paths and base64 content to CheckPath and
// artifact.put: an accepted path stays inside the task, a put answers
// the artifact or a clear invalid_argument / size_limit_exceeded, and
// what was stored reads back. Never a panic.
func FuzzPut(f *testing.F) {
	for _, s := range [][2]string{{"a/b.md", "YWJj"}, {"../x", ""}, {"a//b", "=="}, {"a\\b", "YQ"}, {"./a", "!!!!"}, {"a/.", "AAAA"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, path, content string) {
		if artifact.CheckPath(path) == nil {
			if path == "" || strings.HasPrefix(path, "/") || strings.ContainsAny(path, "\\\x00") || len(path) > artifact.MaxPathBytes {
				t.Fatalf("CheckPath accepted %q", path)
			}
			for _, seg := range strings.Split(path, "/") {
				if seg == ".." || seg == "." || seg == "" {
					t.Fatalf("CheckPath accepted %q", path)
				}
			}
		}
		d, spec := start(t)
		d.Limits.MaxArtifactBytes = 64
		v, err := d.Run(spec(artifact.ToolPut), ct.SandboxAgent, map[string]any{"task_id": "t1", "path": path, "content_bytes_base64": content})
		if err != nil {
			if err.Type != gateway.TypeInvalidArgument && err.Type != gateway.TypeSizeLimit {
				t.Fatalf("put(%q, %q): %v", path, content, err)
			}
			return
		}
		back := d.OK(spec(artifact.ToolGet), ct.SandboxAgent, map[string]any{"task_id": "t1", "path": path})
		if ct.Str(back, "sha256") != ct.Str(v, "sha256") {
			t.Fatalf("put(%q) = %v, get = %v", path, v, back)
		}
	})
}
