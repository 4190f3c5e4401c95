package objblob_test

import (
	"fmt"
	"testing"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/services/state/blob"
)

// BenchmarkPutGet is one blob's Put and then its Get from another
// connection, on a single server (R1, fsync before acknowledge), by size:
//
//	go test -run '^$' -bench PutGet -benchtime 200x ./services/state/blob/objblob
func BenchmarkPutGet(b *testing.B) {
	srv := meshtest.NATS(b)
	for _, size := range []int{4 << 10, 512 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			core := meshtest.Conn(b, srv)
			a, bs := openB(b, core, meshtest.Conn(b, srv), meshtest.Conn(b, srv))
			content := make([]byte, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := range b.N {
				content[0], content[1], content[2] = byte(i), byte(i>>8), byte(i>>16)
				name := blob.SHA256Name("bench", content)
				if err := a.Put(b.Context(), name, content); err != nil {
					b.Fatal(err)
				}
				if _, err := bs.Get(b.Context(), name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
