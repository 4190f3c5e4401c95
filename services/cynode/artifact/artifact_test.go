package artifact_test

import (
	"encoding/base64"
	"slices"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/services/cynode/artifact"
	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
)

func start(t testing.TB) (*ct.Direct, func(string) gateway.Spec) {
	t.Helper()
	d := ct.NewDirect(t, nil)
	d.Seed()
	specs := artifact.Specs()
	return d, func(name string) gateway.Spec { return d.Spec(specs, name) }
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestCheckPath(t *testing.T) {
	for _, tc := range []struct {
		path string
		says string // "" for accepted
	}{
		{"report.md", ""},
		{"out/deep/er/report.md", ""},
		{"..a/b..", ""},
		{".hidden", ""},
		{strings.Repeat("a", 1024), ""},
		{"", "is empty"},
		{strings.Repeat("a", 1025), "is longer than 1024 bytes"},
		{"/etc/passwd", "is absolute"},
		{`a\b`, "contains a backslash or NUL"},
		{"a\x00b", "contains a backslash or NUL"},
		{"../up", `climbs out of the task with ".."`},
		{"a/../../up", "climbs out"},
		{"a//b", `has an empty or "." segment`},
		{"a/./b", `has an empty or "." segment`},
		{"a/", "empty"},
		{".", "empty"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			err := artifact.CheckPath(tc.path)
			if tc.says == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			ge, ok := err.(*gateway.Error)
			if !ok || ge.Type != gateway.TypeInvalidArgument || !strings.Contains(ge.Message, tc.says) || !strings.Contains(ge.Message, `pass a relative path such as "out/report.md"`) {
				t.Fatalf("CheckPath = %v; want invalid_argument saying %q and what to pass", err, tc.says)
			}
		})
	}
}

func TestPutGetList(t *testing.T) {
	d, spec := start(t)
	put, get, list := spec(artifact.ToolPut), spec(artifact.ToolGet), spec(artifact.ToolList)
	for i, st := range []struct {
		path, content string
		version       float64
	}{
		{"out/a.md", "alpha", 1},
		{"out/a.md", "beta", 2},
		{"b.bin", "\x00\xff\x01", 1},
		{"empty", "", 1},
	} {
		got := d.OK(put, ct.SandboxAgent, map[string]any{"task_id": "t1", "path": st.path, "content_bytes_base64": b64(st.content)})
		if got["version"] != st.version || got["size_bytes"] != float64(len(st.content)) || got["task_id"] != "t1" || got["path"] != st.path {
			t.Fatalf("put %d = %v", i, got)
		}
		back := d.OK(get, ct.PMAgent, map[string]any{"task_id": "t1", "path": st.path})
		if back["content_bytes_base64"] != nil && back["content_bytes_base64"] != b64(st.content) || back["sha256"] != got["sha256"] || back["version"] != st.version {
			t.Fatalf("get %d = %v", i, back)
		}
	}
	var paths []string
	args := map[string]any{"task_id": "t1", "limit": 1}
	for range 10 {
		page := d.OK(list, ct.PAAgent, args)
		for _, a := range page["artifacts"].([]any) {
			if ct.Get(a, "content_bytes_base64") != nil {
				t.Fatalf("list returned content: %v", a)
			}
			paths = append(paths, ct.Str(a, "path"))
		}
		if ct.Str(page, "next_cursor") == "" {
			break
		}
		args["cursor"] = ct.Str(page, "next_cursor")
	}
	if want := []string{"b.bin", "empty", "out/a.md"}; !slices.Equal(paths, want) {
		t.Fatalf("listed %v; want %v", paths, want)
	}
	if got := d.OK(list, ct.PMAgent, map[string]any{"task_id": "t-other"}); got["artifacts"] == nil || len(got["artifacts"].([]any)) != 0 {
		t.Fatalf("a task without artifacts lists [] (not null): %v", got)
	}
}

func TestRefusals(t *testing.T) {
	d, spec := start(t)
	d.Limits.MaxArtifactBytes = 10
	d.Limits.MaxListLimit = 5
	put, get, list := spec(artifact.ToolPut), spec(artifact.ToolGet), spec(artifact.ToolList)
	d.OK(put, ct.SandboxAgent, map[string]any{"task_id": "t1", "path": "ten", "content_bytes_base64": b64("0123456789")})
	for _, tc := range []struct {
		name string
		sp   gateway.Spec
		args map[string]any
		typ  string
		says string
	}{
		{"over the limit", put, map[string]any{"path": "big", "content_bytes_base64": b64("0123456789a")}, "size_limit_exceeded", "the artifact is 11 bytes, over the limit of 10 (limits.max_artifact_bytes); split it"},
		{"far over the limit", put, map[string]any{"path": "big", "content_bytes_base64": b64(strings.Repeat("x", 100))}, "size_limit_exceeded", "over the limit of 10"},
		{"not base64", put, map[string]any{"path": "x", "content_bytes_base64": "not base64!"}, "invalid_argument", "content_bytes_base64 is not standard base64 (RFC 4648 with padding)"},
		{"url-safe base64", put, map[string]any{"path": "x", "content_bytes_base64": base64.URLEncoding.EncodeToString([]byte{0xfb, 0xff})}, "invalid_argument", "not standard base64"},
		{"unpadded base64", put, map[string]any{"path": "x", "content_bytes_base64": "YQ"}, "invalid_argument", "not standard base64"},
		{"put outside the task", put, map[string]any{"path": "../t2/x", "content_bytes_base64": b64("x")}, "invalid_argument", "climbs out"},
		{"get outside the task", get, map[string]any{"path": "/abs"}, "invalid_argument", "is absolute"},
		{"get a missing path", get, map[string]any{"path": "nope"}, "not_found", `task t1 has no artifact at "nope" (artifact.list shows its paths)`},
		{"get of another task", get, map[string]any{"task_id": "t2", "path": "ten"}, "not_found", "task t2 has no artifact"},
		{"list over max_list_limit", list, map[string]any{"limit": 6}, "invalid_argument", "limit 6 is out of range: pass 1..5"},
		{"list with a foreign cursor", list, map[string]any{"cursor": "%%"}, "invalid_argument", "cursor"},
		{"path of the wrong type", put, map[string]any{"path": 7, "content_bytes_base64": ""}, "invalid_argument", "arguments:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := tc.args["task_id"]; !ok {
				tc.args["task_id"] = "t1"
			}
			d.For(t).Fail(tc.sp, ct.SandboxAgent, tc.args, tc.typ, tc.says)
		})
	}
	// Nothing refused was stored.
	got := d.OK(list, ct.SandboxAgent, map[string]any{"task_id": "t1"})
	if n := len(got["artifacts"].([]any)); n != 1 {
		t.Fatalf("%d artifacts after the refusals: %v", n, got)
	}
}

func TestSpecs(t *testing.T) {
	for _, sp := range artifact.Specs() {
		if !sp.TaskScoped || sp.Scope != gateway.ScopeBoth || sp.Run == nil {
			t.Errorf("%s: task-scoped %v, scope %s; every artifact tool is task-scoped with scope both", sp.Name, sp.TaskScoped, sp.Scope)
		}
		if want := sp.Name == artifact.ToolPut; slices.Contains(sp.BinaryFields, "content_bytes_base64") != want {
			t.Errorf("%s: binary fields %v", sp.Name, sp.BinaryFields)
		}
	}
}
