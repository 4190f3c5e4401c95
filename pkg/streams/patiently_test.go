package streams

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestPatientlyRetriesUnavailable: JetStream's "temporarily unavailable"
// (a cluster still electing) is sent again; any other API error ends the
// step at once, and so does a context that ends.
func TestPatientlyRetriesUnavailable(t *testing.T) {
	unavailable := &jetstream.APIError{Code: 503, ErrorCode: jsClusterNotAvail, Description: "JetStream system temporarily unavailable"}
	other := &jetstream.APIError{Code: 400, ErrorCode: 10025, Description: "bad request"}
	for _, tc := range []struct {
		name  string
		errs  []error
		want  error
		calls int
	}{
		{"unavailable twice, then stored", []error{unavailable, unavailable, nil}, nil, 3},
		{"another API error", []error{other, nil}, other, 1},
		{"unavailable, then another error", []error{unavailable, other}, other, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := patiently(context.Background(), func(context.Context) error {
				err := tc.errs[calls]
				calls++
				return err
			})
			if !errors.Is(err, tc.want) || calls != tc.calls {
				t.Fatalf("err %v after %d calls, want %v after %d", err, calls, tc.want, tc.calls)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := patiently(ctx, func(context.Context) error {
		calls++
		cancel()
		return unavailable
	})
	if !errors.Is(err, unavailable) || calls != 1 {
		t.Fatalf("ended ctx: err %v after %d calls", err, calls)
	}
}
