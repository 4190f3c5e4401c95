package admit

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestElecting: which publish errors make the admission send the command
// again — the stream has no leader (10008, no responders, no answer from
// the stream) or another copy of it is being stored (10158) — and which
// end the dispatch.
func TestElecting(t *testing.T) {
	live := context.Background()
	timedOut, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-timedOut.Done()
	for _, tc := range []struct {
		name    string
		err     error
		attempt context.Context
		want    bool
	}{
		{"no leader (10008)", &jetstream.APIError{Code: 503, ErrorCode: 10008}, live, true},
		{"another copy in process (10158)", fmt.Errorf("publish: %w", &jetstream.APIError{Code: 409, ErrorCode: errCodeMsgIDInProcess}), live, true},
		{"no responders", nats.ErrNoResponders, live, true},
		{"no stream response", jetstream.ErrNoStreamResponse, live, true},
		{"attempt timed out", context.DeadlineExceeded, timedOut, true},
		{"wrong last sequence (10071)", &jetstream.APIError{Code: 400, ErrorCode: 10071}, live, false},
		{"other error", errors.New("boom"), live, false},
	} {
		if got := electing(tc.err, tc.attempt); got != tc.want {
			t.Errorf("%s: electing = %v, want %v", tc.name, got, tc.want)
		}
	}
}
