package jsstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkServerBatch measures what the server charges for a plain
// publish and for atomic batches of 2 and 3 tiny messages on a
// single-replica file stream, without the store: a single-replica stream
// stages every atomic batch in a file store of its own before the commit,
// which is most of what a jsstore Put costs on one server.
func BenchmarkServerBatch(b *testing.B) {
	ns := startServer(b, "")
	nc := connect(b, ns)
	js, _ := jetstream.New(nc)
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "rawbatch", Subjects: []string{"rawbatch.>"}, AllowAtomicPublish: true, Storage: jetstream.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
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
