package jspolicy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/jspolicy"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore/policystoretest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/embednats"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/registry/jsreg"
)

var _ policystore.Store = (*jspolicy.Store)(nil)

// bucketSeq names a fresh bucket per storage on a shared server.
var bucketSeq atomic.Int64

func freshBucket() string { return fmt.Sprintf("pol_%d", bucketSeq.Add(1)) }

// open opens a store over a new connection to srv (a "node" or a restart).
func open(t testing.TB, srv *embednats.Server, cfg jspolicy.Config) *jspolicy.Store {
	t.Helper()
	js, err := jetstream.New(meshtest.Conn(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	s, err := jspolicy.Open(context.Background(), js, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	srv := meshtest.NATS(t)
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("DirectReads=%v", direct), func(t *testing.T) {
			policystoretest.Run(t, func(t *testing.T) policystoretest.Opener {
				bucket := freshBucket()
				return func(t *testing.T, cfg policystoretest.Config) policystore.Store {
					return open(t, srv, jspolicy.Config{Bucket: bucket, HistoryLimit: cfg.HistoryLimit, Actions: cfg.Actions, DirectReads: direct})
				}
			})
		})
	}
}

// TestTwoNodes: replacements confirmed against the same version on two
// nodes store exactly one; each node sees the other's writes.
func TestTwoNodes(t *testing.T) {
	ctx := context.Background()
	srv := meshtest.NATS(t)
	b := freshBucket()
	nodes := []*jspolicy.Store{open(t, srv, jspolicy.Config{Bucket: b}), open(t, srv, jspolicy.Config{Bucket: b})}
	if _, err := nodes[0].PutPolicies(ctx, "demo", policystoretest.Policy(0)); err != nil {
		t.Fatal(err)
	}
	for round := uint64(1); round <= 5; round++ {
		won := policystoretest.Race(t, 8, func(i int) (*authz.PolicyDoc, error) {
			return nodes[i%2].ReplacePolicies(ctx, "demo", policystoretest.Policy(int(round)*100+i), round)
		})
		if len(won) != 1 {
			t.Fatalf("round %d: %d replacements based on version %d were stored, want 1", round, len(won), round)
		}
	}
	for i, s := range nodes {
		h, err := s.History(ctx, "demo")
		if err != nil || len(h) != 6 || h[0].Version != 6 || !h[0].Current {
			t.Fatalf("node %d history = %+v, %v; want versions 6..1", i, h, err)
		}
	}
	if err := nodes[1].PutConfig(ctx, "demo", authz.ProjectConfig{Mandate: authz.MandateNotRequired}); err != nil {
		t.Fatal(err)
	}
	if c, err := nodes[0].Config(ctx, "demo"); err != nil || c.Required() {
		t.Fatalf("config put on node 1, read on node 0 = %+v, %v", c, err)
	}
}

// TestBucketConfig: the bucket keeps HistoryLimit revisions per key with
// the configured replicas, and limits it cannot have are refused saying
// what to use.
func TestBucketConfig(t *testing.T) {
	ctx := context.Background()
	srv := meshtest.NATS(t)
	js, err := jetstream.New(meshtest.Conn(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	b := freshBucket()
	open(t, srv, jspolicy.Config{Bucket: b})
	st, err := js.Stream(ctx, "KV_"+b)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; cfg.MaxMsgsPerSubject != jspolicy.HistoryLimit || cfg.Replicas != 1 || cfg.Storage != jetstream.FileStorage {
		t.Fatalf("bucket: history %d, replicas %d, storage %v", cfg.MaxMsgsPerSubject, cfg.Replicas, cfg.Storage)
	}
	tests := []struct {
		name string
		cfg  jspolicy.Config
		want string
	}{
		{"history 65", jspolicy.Config{HistoryLimit: 65}, "1 to 64 revisions"},
		{"history negative", jspolicy.Config{HistoryLimit: -1}, "1 to 64 revisions"},
		{"3 replicas on one server", jspolicy.Config{Replicas: 3}, "set replicas to 1"},
	}
	for _, tc := range tests {
		tc.cfg.Bucket = freshBucket()
		if _, err := jspolicy.Open(ctx, js, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestClosedConnection: calls on a closed NATS connection fail with
// authz.ErrClosed.
func TestClosedConnection(t *testing.T) {
	ctx := context.Background()
	srv := meshtest.NATS(t)
	nc := meshtest.Conn(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := jspolicy.Open(ctx, js, jspolicy.Config{Bucket: freshBucket()})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if _, err := s.Policies(ctx, "demo"); !errors.Is(err, authz.ErrClosed) {
		t.Errorf("Policies = %v", err)
	}
	if _, err := s.PutPolicies(ctx, "demo", policystoretest.Policy(1)); !errors.Is(err, authz.ErrClosed) {
		t.Errorf("PutPolicies = %v", err)
	}
	if _, err := s.History(ctx, "demo"); !errors.Is(err, authz.ErrClosed) {
		t.Errorf("History = %v", err)
	}
	if err := s.PutConfig(ctx, "demo", authz.ProjectConfig{}); !errors.Is(err, authz.ErrClosed) {
		t.Errorf("PutConfig = %v", err)
	}
}

var _ policystore.Store = (*jspolicy.Store)(nil)

// TestTwoAuthzServices: two natsauthz services (two mesh nodes) on the same
// registry and policy buckets share the svc.authz queue group; a client's
// requests land on either, and the versions, the base checks and the
// validation against the tools registered on the other node hold.
func TestTwoAuthzServices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := meshtest.NATS(t)
	regBucket, polBucket := "reg_"+freshBucket(), freshBucket()
	var regs []*jsreg.Store
	for range 2 {
		nc := meshtest.Conn(t, srv)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		reg, err := jsreg.Open(ctx, js, jsreg.Config{Bucket: regBucket})
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, reg)
		pol, err := jspolicy.Open(ctx, js, jspolicy.Config{Bucket: polBucket, Actions: authz.RegistryActions{Registry: reg}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pol.Close() })
		svc, err := natsauthz.Start(ctx, nc, natsauthz.StartConfig{DataDir: t.TempDir(), Registry: reg, Store: pol})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	}
	_, err := regs[0].Put(ctx, &registry.Entry{ProjectID: "demo", ToolName: "ATLAS_TASK_LIST", Description: "list tasks",
		Parameters: json.RawMessage(`{"type":"object"}`), TargetSubject: "cg.{ver}.{project_id}.{channel_id}.cmd.tool.atlas_task_list",
		AfterExecution: card.Suspend, Options: registry.Options{CedarAction: `ATLASAction::"TASK_LIST"`}})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := natsauthz.NewClient(meshtest.Conn(t, srv), "")
	if err != nil {
		t.Fatal(err)
	}
	text := func(i int) string {
		return fmt.Sprintf("@id(\"v%d\") permit(principal, action == ATLASAction::\"TASK_LIST\", resource);\n", i)
	}
	const rounds = 6
	for i := 1; i <= rounds; i++ {
		if d, err := cl.ReplacePolicies(ctx, "demo", text(i), uint64(i-1)); err != nil || d.Version != uint64(i) {
			t.Fatalf("replace %d = %+v, %v", i, d, err)
		}
	}
	won := policystoretest.Race(t, 8, func(i int) (*authz.PolicyDoc, error) {
		return cl.ReplacePolicies(ctx, "demo", text(100+i), rounds)
	})
	if len(won) != 1 {
		t.Fatalf("%d concurrent replacements on version %d were stored, want 1", len(won), rounds)
	}
	if h, err := cl.History(ctx, "demo"); err != nil || len(h) != rounds+1 || !h[0].Current {
		t.Fatalf("history = %+v, %v", h, err)
	}
	// The tool removed on the second node: rollback (on either node)
	// validates against the registry both share.
	if err := regs[1].Delete(ctx, "demo", "ATLAS_TASK_LIST"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Rollback(ctx, "demo", 1, rounds+1); !errors.Is(err, authz.ErrInvalidPolicy) || !strings.Contains(err.Error(), "unknown action") {
		t.Fatalf("rollback naming a removed tool = %v", err)
	}
}
