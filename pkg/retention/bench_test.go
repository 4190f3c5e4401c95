package retention_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/retention"
)

// BenchmarkDisk measures the data directory's growth per 1,000 echo
// calls on a real mesh (fsync on), by part: cards.db (cards and inbox entries; inbox-B is 0 since the node file),
// jetstream/ and archive/, with retention off and on (a ten-minute max
// age, the sweeper's clock moved past it after every 1,000 calls, as an
// operator's 10-minute sweep would find a busy project). 1,000 calls
// and a sweep warm the files up first; run it with a fixed op count in
// thousands, e.g. -benchtime 5000x (make bench does).
func BenchmarkDisk(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "retention=off"
		pol := retention.Policy{MaxAge: 10 * time.Minute}
		if on {
			name = "retention=on"
		}
		b.Run(name, func(b *testing.B) {
			sm := startSoakMesh(b, pol)
			ac, err := agent.New(sm.nc, agent.Config{Project: project, AgentID: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer ac.Close()
			round := 0
			chunk := func(n int) {
				sm.calls(b, ac, fmt.Sprintf("b%d", round), n, 32)
				round++
				sm.settle(b, 0)
				if on {
					sm.ahead.Store(int64(20 * time.Minute))
					sm.sweep(b)
				}
			}
			sizes := func() [4]int64 {
				return [4]int64{fileSize(b, filepath.Join(sm.dir, "cards.db")), 0, // the inbox's entries are in cards.db, the node file
					dirSize(b, filepath.Join(sm.dir, "jetstream")), dirSize(b, filepath.Join(sm.dir, "archive"))}
			}
			chunk(1000)
			before := sizes()
			b.ResetTimer()
			for done := 0; done < b.N; done += 1000 {
				chunk(min(1000, b.N-done))
			}
			b.StopTimer()
			after := sizes()
			per := float64(b.N) / 1000
			for i, part := range []string{"cards", "inbox", "jetstream", "archive"} {
				b.ReportMetric(float64(after[i]-before[i])/per, part+"-B/1k-calls")
			}
			b.ReportMetric(float64(after[0]+after[1]+after[2]-before[0]-before[1]-before[2])/per, "live-B/1k-calls")
		})
	}
}
