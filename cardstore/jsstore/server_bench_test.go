package jsstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkServerBatch measures what the server charges for a plain
// publish and for atomic batches of 2 and 3 tiny messages, without the
// store, on a single-replica file stream (R1) and on a three-replica one
// (R3, 3-node cluster in this process). A single-replica stream stages
// every atomic batch in a file store of its own and fsyncs it before the
// commit, which is most of what a jsstore Put costs on one server; a
// replicated stream stages it in memory.
func BenchmarkServerBatch(b *testing.B) {
	ns := startServer(b, "")
	cluster := startCluster(b, 3)
	for _, tc := range []struct {
		name     string
		url      string
		replicas int
	}{{"R1", ns.ClientURL(), 1}, {"R3", cluster[0].ClientURL(), 3}} {
		nc, err := nats.Connect(tc.url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		js, _ := jetstream.New(nc)
		var cerr error
		for range 100 { // a new cluster may not answer at once
			if _, cerr = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "rawbatch", Subjects: []string{"rawbatch.>"},
				AllowAtomicPublish: true, Storage: jetstream.FileStorage, Replicas: tc.replicas}); cerr == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if cerr != nil {
			b.Fatal(cerr)
		}
		for _, n := range []int{1, 2, 3} {
			b.Run(fmt.Sprintf("%s/messages=%d", tc.name, n), func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					id := fmt.Sprintf("b%d-%d", n, i)
					for j := 1; j <= n; j++ {
						m := &nats.Msg{Subject: fmt.Sprintf("rawbatch.%d", j), Data: []byte("x"), Header: nats.Header{}}
						if n > 1 {
							m.Header.Set("Nats-Batch-Id", id)
							m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(j))
						}
						if j < n {
							if err := nc.PublishMsg(m); err != nil {
								b.Fatal(err)
							}
							continue
						}
						if n > 1 {
							m.Header.Set("Nats-Batch-Commit", "1")
						}
						if _, err := js.PublishMsg(context.Background(), m); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
