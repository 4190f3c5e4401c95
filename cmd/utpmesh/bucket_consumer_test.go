package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/inbox/kvinbox"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/cynode"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/blob/objblob"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
	"github.com/utpmesh/utpmesh/subjects"
)

// A worker identity of a service with replicated state (ATP, an ATLAS
// group, CyNodeAI and its object store) reads and scans its bucket
// without any consumer, and may create none on it: nats-server does not check a push consumer's deliver
// subject against its creator's permissions, so a consumer it could
// create would deliver the bucket's values (which it writes) on a subject
// it may not publish, an agent's wakeup included (a forged wakeup).
func TestWorkersCreateNoBucketConsumer(t *testing.T) {
	dir := t.TempDir()
	_, banner := startUpInProcess(t, "--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "",
		"--services", "echo,atp,atlas.tasks,cynode", "--state", "jetstream")
	m := regexp.MustCompile(`(?m)^\s+NATS\s+(nats://\S+)`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("no NATS URL in the banner:\n%s", banner)
	}
	wake, err := subjects.AgentWakeup(subjects.DefaultVersion, "demo", "default", "demo-agent")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ service, bucket, objects string }{
		{"atp", atp.StateBucket, ""},
		{"atlas.tasks", atlas.KVBucket("tasks"), ""},
		{"cynode", cynode.StateBucket, cynode.BlobBucket},
	} {
		t.Run(tc.service, func(t *testing.T) {
			w, err := connectAs(t, m[1], creds.SeedPath(filepath.Join(dir, "creds"), creds.WorkerName(tc.service)))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// Its own use of the bucket: a commit, the project list and a
			// scan, with no permission violation.
			kv, err := kvstate.Open(ctx, w.nc, kvstate.Config{Bucket: tc.bucket})
			if err != nil {
				t.Fatalf("worker-%s opens its state: %v", tc.service, err)
			}
			if err := kv.Update(ctx, func(tx state.Tx) error { return tx.Bucket("demo", "probe").Put("k", []byte("v")) }); err != nil {
				t.Fatalf("worker-%s commits: %v", tc.service, err)
			}
			var projects, keys []string
			if err := kv.View(ctx, func(tx state.Tx) error {
				keys = nil
				if projects, err = tx.Projects(); err != nil {
					return err
				}
				return tx.Bucket("demo", "probe").Scan("", false, func(k string, _ []byte) error { keys = append(keys, k); return nil })
			}); err != nil {
				t.Fatalf("worker-%s lists and scans: %v", tc.service, err)
			}
			if len(keys) != 1 || keys[0] != "k" || len(projects) == 0 {
				t.Fatalf("worker-%s read projects %v, keys %v; want demo among the projects and the key k", tc.service, projects, keys)
			}
			select {
			case err := <-w.errs:
				t.Fatalf("permission violation using its own bucket: %v", err)
			default:
			}
			// Its object store: a put, a get and a delete, with no
			// permission violation.
			streams := map[string]string{"KV_" + tc.bucket: "$KV." + tc.bucket + ".>"}
			if tc.objects != "" {
				obs, err := objblob.Open(ctx, w.nc, objblob.Config{Bucket: tc.objects})
				if err != nil {
					t.Fatalf("worker-%s opens its object store: %v", tc.service, err)
				}
				content := []byte(strings.Repeat("blob ", 40000))
				if err := obs.Put(ctx, "probe", content); err != nil {
					t.Fatalf("worker-%s puts a blob: %v", tc.service, err)
				}
				if got, err := obs.Get(ctx, "probe"); err != nil || string(got) != string(content) {
					t.Fatalf("worker-%s reads its blob: %d bytes, %v", tc.service, len(got), err)
				}
				if err := obs.Delete(ctx, "probe"); err != nil {
					t.Fatalf("worker-%s deletes its blob: %v", tc.service, err)
				}
				select {
				case err := <-w.errs:
					t.Fatalf("permission violation using its own object store: %v", err)
				default:
				}
				streams[objblob.Stream(tc.objects)] = "$O." + tc.objects + ".>"
			}
			// A push consumer on its own bucket delivering to an agent's
			// wakeup subject, in each form of the create request.
			for stream, filter := range streams {
				body, err := json.Marshal(map[string]any{"stream_name": stream, "config": map[string]any{
					"name": "evil", "deliver_subject": wake.String(), "ack_policy": "none",
					"filter_subject": filter}})
				if err != nil {
					t.Fatal(err)
				}
				for _, subj := range []string{
					"$JS.API.CONSUMER.CREATE." + stream,
					"$JS.API.CONSUMER.CREATE." + stream + ".evil",
					"$JS.API.CONSUMER.CREATE." + stream + ".evil." + filter,
					"$JS.API.CONSUMER.DURABLE.CREATE." + stream + ".evil",
				} {
					if err := w.nc.PublishRequest(subj, w.nc.NewRespInbox(), body); err != nil {
						t.Fatal(err)
					}
					if err := w.nc.Flush(); err != nil {
						t.Fatal(err)
					}
					w.waitViolation(t, "publish", subj)
				}
			}
			// Nor purge its bucket or the inbox's: the core purges their
			// old delete markers (retention.MarkerPurger).
			for _, subj := range []string{"$JS.API.STREAM.PURGE.KV_" + tc.bucket, "$JS.API.STREAM.PURGE.KV_" + kvinbox.DefaultBucket} {
				if err := w.nc.PublishRequest(subj, w.nc.NewRespInbox(), []byte(`{"filter":"$KV.`+tc.bucket+`.>"}`)); err != nil {
					t.Fatal(err)
				}
				w.waitViolation(t, "publish", subj)
			}
		})
	}
}
