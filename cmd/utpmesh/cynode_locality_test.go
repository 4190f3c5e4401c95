package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/services/cynode/sandbox"
	"github.com/utpmesh/utpmesh/subjects"
)

// TestCynodeNodeSubjectPermissions: the sandbox nodes' subjects
// (cg.<ver>.<project>.<channel>.svc.cynode.node.<node>) and the sandbox
// records bucket are the cynode worker identity's only. worker-cynode, as
// `up` writes it, serves a node subject, reaches another node (up's own
// cynode node answers its probe) and uses the bucket without a
// violation; an agent and another service's worker may neither publish
// nor subscribe there, nor write the bucket.
func TestCynodeNodeSubjectPermissions(t *testing.T) {
	dir := t.TempDir()
	_, banner := startUpInProcess(t, "--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "",
		"--services", "echo,cynode,atp")
	m := regexp.MustCompile(`(?m)^\s+NATS\s+(nats://\S+)`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("no NATS URL in the banner:\n%s", banner)
	}
	url := m[1]
	seed := func(name string) string { return creds.SeedPath(filepath.Join(dir, "creds"), name) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	holder, err := connectAs(t, url, seed(creds.WorkerName("cynode")))
	if err != nil {
		t.Fatal(err)
	}
	caller, err := connectAs(t, url, seed(creds.WorkerName("cynode")))
	if err != nil {
		t.Fatal(err)
	}
	subj, err := subjects.NodeService(subjects.DefaultVersion, "demo", "default", sandbox.SubjectService, "probe-node")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := holder.nc.Subscribe(subj, func(m *nats.Msg) { _ = m.Respond([]byte("here")) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := holder.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if msg, err := deadline.Request(ctx, caller.nc, subj, nil); err != nil || string(msg.Data) != "here" {
		t.Fatalf("worker-cynode reaches a node: %v", err)
	}
	// up's own cynode worker is a node: its name is in its data dir.
	raw, err := os.ReadFile(filepath.Join(dir, sandbox.NodeFile))
	if err != nil {
		t.Fatal(err)
	}
	upNode := strings.TrimSpace(string(raw))
	upSubj, err := subjects.NodeService(subjects.DefaultVersion, "demo", "default", sandbox.SubjectService, upNode)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := deadline.Request(ctx, caller.nc, upSubj, []byte(`{"op":"ping"}`))
	var rep struct {
		Node string `json:"node"`
	}
	if err != nil || json.Unmarshal(msg.Data, &rep) != nil || rep.Node != upNode {
		t.Fatalf("up's node %s answers a probe: %v", upNode, err)
	}
	js, err := jetstream.New(caller.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, sandbox.Bucket)
	if err != nil {
		t.Fatalf("worker-cynode binds %s: %v", sandbox.Bucket, err)
	}
	if _, err := kv.Create(ctx, "probe", []byte("{}")); err != nil {
		t.Fatalf("worker-cynode writes %s: %v", sandbox.Bucket, err)
	}
	if _, err := kv.Get(ctx, "probe"); err != nil {
		t.Fatalf("worker-cynode reads %s: %v", sandbox.Bucket, err)
	}
	for _, a := range []*actor{holder, caller} {
		select {
		case err := <-a.errs:
			t.Fatalf("worker-cynode: permission violation: %v", err)
		default:
		}
	}

	pattern, err := subjects.NodeServicePattern(subjects.DefaultVersion, sandbox.SubjectService, "*")
	if err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{creds.WorkerName("atp"), creds.WorkerName("echo"), "agent-demo"} {
		t.Run(who, func(t *testing.T) {
			a, err := connectAs(t, url, seed(who))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{subj, upSubj, "$KV." + sandbox.Bucket + ".probe", "$JS.API.STREAM.MSG.GET.KV_" + sandbox.Bucket} {
				if err := a.nc.Publish(s, []byte(`{"op":"ping"}`)); err != nil {
					t.Fatal(err)
				}
				a.waitViolation(t, "publish", s)
			}
			if _, err := a.nc.Subscribe(pattern, func(*nats.Msg) {}); err != nil {
				t.Fatal(err)
			}
			a.waitViolation(t, "subscription", pattern)
		})
	}
}
