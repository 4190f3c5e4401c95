// Package artifact is the CyNodeAI artifact tools: artifact.put,
// artifact.get and artifact.list. Artifacts are files of a task, named by
// a relative path; their content is stored once per SHA-256
// (content-addressed) and bounded by limits.max_artifact_bytes. Paths are
// relative, '/'-separated, and may not climb out of the task (no "..",
// no leading '/', no '\', no empty or "." segment). All three tools are
// task-scoped and have scope both (sandbox and PM/PA agents).
package artifact

import (
	"context"
	"encoding/base64"
	"strings"

	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
	"github.com/utpmesh/utpmesh/services/cynode/store"
)

// Tool names.
const (
	ToolPut  = "artifact.put"
	ToolGet  = "artifact.get"
	ToolList = "artifact.list"
)

// MaxPathBytes bounds an artifact path.
const MaxPathBytes = 1024

var (
	pathSchema = `{"type":"string","minLength":1,"maxLength":1024,"description":"relative path inside the task, '/'-separated"}`
	putParams  = `{"type":"object","additionalProperties":false,"required":["task_id","path","content_bytes_base64"],"properties":{
	"task_id":` + gateway.IDSchema + `,"path":` + pathSchema + `,"content_bytes_base64":{"type":"string","contentEncoding":"base64"},` + gateway.ContextSchema + `}}`
	getParams = `{"type":"object","additionalProperties":false,"required":["task_id","path"],"properties":{
	"task_id":` + gateway.IDSchema + `,"path":` + pathSchema + `,` + gateway.ContextSchema + `}}`
	listParams = `{"type":"object","additionalProperties":false,"required":["task_id"],"properties":{
	"task_id":` + gateway.IDSchema + `,` + gateway.PageSchema + `,` + gateway.ContextSchema + `}}`
)

// Specs are the artifact tools.
func Specs() []gateway.Spec {
	return []gateway.Spec{
		{Name: ToolPut, Description: "Stores content (base64) as an artifact of a task at a relative path; returns its sha256, size and version.",
			Params: putParams, Scope: gateway.ScopeBoth, TaskScoped: true, BinaryFields: []string{"content_bytes_base64"}, Run: put},
		{Name: ToolGet, Description: "Returns an artifact of a task (content_bytes_base64, sha256, size, version).",
			Params: getParams, Scope: gateway.ScopeBoth, TaskScoped: true, Run: get},
		{Name: ToolList, Description: "Lists a task's artifacts by path (without content), paginated with limit and next_cursor.",
			Params: listParams, Scope: gateway.ScopeBoth, TaskScoped: true, Run: list},
	}
}

// CheckPath refuses paths that are not plain relative paths inside a task.
func CheckPath(p string) error {
	bad := func(why string) error {
		return gateway.Errorf(gateway.TypeInvalidArgument, "path %q %s; pass a relative path such as \"out/report.md\"", p, why)
	}
	switch {
	case p == "":
		return bad("is empty")
	case len(p) > MaxPathBytes:
		return bad("is longer than 1024 bytes")
	case strings.HasPrefix(p, "/"):
		return bad("is absolute")
	case strings.ContainsAny(p, "\\\x00"):
		return bad("contains a backslash or NUL")
	}
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "..":
			return bad("climbs out of the task with \"..\"")
		case "", ".":
			return bad("has an empty or \".\" segment")
		}
	}
	return nil
}

type view struct {
	store.Artifact
	ContentBase64 string `json:"content_bytes_base64,omitempty"`
}

func put(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		Path    string `json:"path"`
		Content string `json:"content_bytes_base64"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	if err := CheckPath(a.Path); err != nil {
		return nil, err
	}
	if base64.StdEncoding.DecodedLen(len(a.Content)) > x.Limits.MaxArtifactBytes+3 {
		return nil, gateway.Errorf(gateway.TypeSizeLimit, "the artifact is about %d bytes, over the limit of %d (limits.max_artifact_bytes); split it into several artifacts",
			base64.StdEncoding.DecodedLen(len(a.Content)), x.Limits.MaxArtifactBytes)
	}
	content, err := base64.StdEncoding.DecodeString(a.Content)
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "content_bytes_base64 is not standard base64 (RFC 4648 with padding): %v", err)
	}
	if len(content) > x.Limits.MaxArtifactBytes {
		return nil, gateway.Errorf(gateway.TypeSizeLimit, "the artifact is %d bytes, over the limit of %d (limits.max_artifact_bytes); split it into several artifacts", len(content), x.Limits.MaxArtifactBytes).
			With(map[string]any{"size_bytes": len(content), "limit_bytes": x.Limits.MaxArtifactBytes})
	}
	return x.Store.PutArtifact(ctx, x.TaskID, a.Path, content, x.Now)
}

func get(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		Path string `json:"path"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	if err := CheckPath(a.Path); err != nil {
		return nil, err
	}
	art, content, err := x.Store.GetArtifact(ctx, x.TaskID, a.Path)
	if err != nil {
		return nil, err
	}
	return view{Artifact: art, ContentBase64: base64.StdEncoding.EncodeToString(content)}, nil
}

func list(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		Limit  int    `json:"limit"`
		Cursor string `json:"cursor"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	page, err := x.Page(a.Limit, a.Cursor)
	if err != nil {
		return nil, err
	}
	arts, next, err := x.Store.ListArtifacts(ctx, x.TaskID, page)
	if err != nil {
		return nil, err
	}
	if arts == nil {
		arts = []store.Artifact{}
	}
	return map[string]any{"artifacts": arts, "next_cursor": next}, nil
}
