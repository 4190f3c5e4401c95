package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// bucketConfig is the counters bucket's configuration.
func bucketConfig(bucket string) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: bucket, TTL: 2 * time.Hour,
		Description: "ATP per-client rate-limit counters (utpmesh services/atp/ratelimit)", History: 1}
}

// Provision creates or updates the counters bucket with the mesh core's
// connection (`utpmesh up`) and the mesh's replica count (1, or 3 on a
// cluster, so the counters survive a node): ATP's worker identities may
// not create or update streams, only use the bucket (PublishSubjects).
func Provision(ctx context.Context, nc *nats.Conn, bucket string, replicas int) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("ratelimit: %w", err)
	}
	cfg := bucketConfig(bucket)
	cfg.Replicas = max(replicas, 1)
	if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
		return fmt.Errorf("ratelimit: KV bucket %s: %w", bucket, err)
	}
	return nil
}

// PublishSubjects are the subjects a worker of ATP publishes to for the
// counters in bucket: bind the bucket (stream info), read a counter
// (direct get), compare-and-set it. No stream create or update.
func PublishSubjects(bucket string) []string {
	st := "KV_" + bucket
	return []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO." + st,
		"$JS.API.DIRECT.GET." + st + ".>", "$JS.API.STREAM.MSG.GET." + st,
		"$KV." + bucket + ".>",
	}
}
