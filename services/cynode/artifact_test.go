package cynode_test

import (
	"fmt"
	"strings"
	"testing"

	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
)

func TestArtifacts(t *testing.T) {
	h := ct.Start(t, nil)
	seed(t, h)

	first := h.OK(ct.SandboxAgent, "artifact.put", map[string]any{"task_id": "t1", "path": "out/report.md", "content_bytes_base64": b64("# report")})
	if first["version"] != float64(1) || first["size_bytes"] != float64(8) || len(ct.Str(first, "sha256")) != 64 {
		t.Fatalf("put = %v", first)
	}
	// Same content elsewhere: same blob (content-addressed), its own version.
	other := h.OK(ct.SandboxAgent, "artifact.put", map[string]any{"task_id": "t1", "path": "copy.md", "content_bytes_base64": b64("# report")})
	if other["sha256"] != first["sha256"] || other["version"] != float64(1) {
		t.Fatalf("copy = %v", other)
	}
	second := h.OK(ct.SandboxAgent, "artifact.put", map[string]any{"task_id": "t1", "path": "out/report.md", "content_bytes_base64": b64("# report v2")})
	if second["version"] != float64(2) || second["sha256"] == first["sha256"] {
		t.Fatalf("overwrite = %v", second)
	}
	got := h.OK(ct.PAAgent, "artifact.get", map[string]any{"task_id": "t1", "path": "out/report.md"})
	if got["content_bytes_base64"] != b64("# report v2") || got["version"] != float64(2) {
		t.Fatalf("get = %v", got)
	}

	t.Run("path traversal and bad paths are refused", func(t *testing.T) {
		for _, p := range []string{"../etc/passwd", "/abs", "a/../../b", "a//b", "./a", `a\b`, "a/."} {
			msg := h.Fail(ct.PMAgent, "artifact.put", map[string]any{"task_id": "t1", "path": p, "content_bytes_base64": b64("x")}, "invalid_argument")
			if !strings.Contains(msg, "relative path") {
				t.Errorf("%q: %s", p, msg)
			}
		}
		h.Fail(ct.PMAgent, "artifact.get", map[string]any{"task_id": "t1", "path": "../t-foreign/x"}, "invalid_argument")
		h.Fail(ct.PMAgent, "artifact.put", map[string]any{"task_id": "t1", "path": "x", "content_bytes_base64": "not base64!"}, "invalid_argument")
	})

	t.Run("paginated listing", func(t *testing.T) {
		for i := 0; i < 5; i++ {
			h.OK(ct.PMAgent, "artifact.put", map[string]any{"task_id": "t1", "path": fmt.Sprintf("page/%d", i), "content_bytes_base64": b64("x")})
		}
		var paths []string
		cursor := ""
		pages := 0
		for {
			args := map[string]any{"task_id": "t1", "limit": 3}
			if cursor != "" {
				args["cursor"] = cursor
			}
			page := h.OK(ct.PMAgent, "artifact.list", args)
			pages++
			for _, a := range page["artifacts"].([]any) {
				paths = append(paths, ct.Str(a, "path"))
				if ct.Get(a, "content_bytes_base64") != nil {
					t.Fatalf("a listing carries content: %v", a)
				}
			}
			if cursor = ct.Str(page, "next_cursor"); cursor == "" {
				break
			}
		}
		want := "copy.md out/report.md page/0 page/1 page/2 page/3 page/4"
		if strings.Join(paths, " ") != want || pages != 3 {
			t.Fatalf("%d pages: %v; want %s", pages, paths, want)
		}
		h.Fail(ct.PMAgent, "artifact.list", map[string]any{"task_id": "t1", "cursor": "%%%"}, "invalid_argument")
		msg := h.Fail(ct.PMAgent, "artifact.list", map[string]any{"task_id": "t1", "limit": 1000}, "invalid_argument")
		if !strings.Contains(msg, "1..100") {
			t.Fatalf("limit message %q", msg)
		}
	})
}
