package atlas_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/internal/atlastest"
	"github.com/utpmesh/utpmesh/services/atlas/tasks"
)

// BenchmarkTaskCreate is one TASK_CREATE round trip through a mesh (card,
// command, worker, state, receipt, result, wakeup) on each state.
//
//	go test -run '^$' -bench TaskCreate -benchtime 300x ./services/atlas/
func BenchmarkTaskCreate(b *testing.B) {
	for _, st := range []string{atlas.StateBolt, atlas.StateJetStream} {
		b.Run(st, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			h := atlastest.Start(b, ctx, func(d atlas.Deps) ([]worker.Tool, error) {
				d.State = st
				return tasks.Build(d)
			})
			turn := h.Turn()
			h.OK(turn, tasks.ToolCreate, map[string]any{"title": "warm-up"})
			b.ResetTimer()
			for i := range b.N {
				h.OK(turn, tasks.ToolCreate, map[string]any{"title": fmt.Sprint("t", i)})
			}
		})
	}
}
