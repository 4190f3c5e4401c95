package meshtest

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// StoredWakeups reads every wakeup of an agent of project stored in the
// wakeup stream of protocol version ver (an ordered consumer, from the
// first message) and counts them by tool_call_id: what crash tests check
// against the calls they made.
func StoredWakeups(ctx context.Context, nc *nats.Conn, ver, project, agentID string) (map[string]int, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	filter, err := subjects.WakeupPattern(ver, project, "*", agentID)
	if err != nil {
		return nil, err
	}
	cons, err := js.OrderedConsumer(ctx, streams.WakeupStream(ver), jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return nil, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for left := info.NumPending; left > 0; {
		batch, err := cons.Fetch(int(min(left, 500)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			var w utp.Wakeup
			if err := json.Unmarshal(m.Data(), &w); err != nil {
				return nil, err
			}
			out[w.ToolCallID]++
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("wakeup stream: %d messages announced but none fetched", left)
		}
		left -= uint64(n)
	}
	return out, nil
}
