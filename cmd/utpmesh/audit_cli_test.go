package main

import (
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/services/cynode/audit"
)

// TestCynodeThroughTheCLI serves the cynode catalogue as `utpmesh up
// --services cynode` does (the Cedar gate on, the demo configuration and
// mandate), calls its tools with `utpmesh call` and reads the audit trail
// with `utpmesh audit ls`.
func TestCynodeThroughTheCLI(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "utpmesh-data")
	cm := startServicesMesh(t, root, []string{"cynode"}, nil)
	mandate := filepath.Join(dir, "demo-mandate.jwt")

	content := base64.StdEncoding.EncodeToString([]byte("hello"))
	r := cm.must(t, 0, "call", "artifact.put", "--mandate", mandate, "--json", "--args", `{"task_id":"demo-task","path":"out/hello.txt","content_bytes_base64":"`+content+`"}`)
	wantContains(t, "call artifact.put", r.stdout, `"status": "success"`, `"sha256"`)
	r = cm.must(t, 1, "call", "db.task.get", "--mandate", mandate, "--args", `{"task_id":"t-none"}`)
	wantContains(t, "call db.task.get", r.stdout+r.stderr, "does not exist in project demo")
	cm.must(t, 0, "call", "db.project.list", "--mandate", mandate, "--args", `{}`)

	r = cm.must(t, 0, "audit", "ls")
	wantContains(t, "audit ls", r.stdout, "artifact.put", "db.task.get", "db.project.list", "demo-agent", "pm", "not_found")
	r = cm.must(t, 0, "audit", "ls", "--tool", "artifact.put", "--task", "demo-task", "--since", "1h", "--json")
	var recs []audit.Record
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || len(recs) != 1 {
		t.Fatalf("audit ls --json: %v\n%s", err, r.stdout)
	}
	if rec := recs[0]; rec.Decision != "allow" || rec.Status != "success" || rec.TaskID != "demo-task" || rec.Subject != "demo-agent" || rec.AgentType != "pm" {
		t.Fatalf("record %+v", rec)
	}
	if strings.Contains(r.stdout, content) || strings.Contains(r.stdout, "out/hello.txt") {
		t.Fatalf("the audit record holds the payload:\n%s", r.stdout)
	}
	r = cm.must(t, 0, "audit", "ls", "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	wantContains(t, "audit ls future", r.stdout, "no audit records")
	r = cm.must(t, 2, "audit", "ls", "--since", "yesterday")
	wantContains(t, "audit ls bad since", r.stderr, "neither a duration")
	cm.must(t, 2, "audit", "show")
}
