package tools_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/internal/atptest"
	"github.com/utpmesh/utpmesh/services/atp/tools"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/holder"
	"github.com/utpmesh/utpmesh/services/toolkit/tooltest"
)

// Every ATP worker uses one state mode, and one local holder at most:
// a worker of the other mode, or a second local one, refuses to start and
// says what to do; once the local holder stops, the shared state may be
// taken (its bucket then records the mode for good).
func TestStateModes(t *testing.T) {
	h := tooltest.Start(t, mesh.Config{})
	m := h.Mesh
	open := func(mode string) (*tools.Service, context.CancelFunc, error) {
		nc, err := nats.Connect(m.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		s, err := tools.Open(atp.Deps{NC: nc, Cards: m.Cards(), DataDir: t.TempDir(), State: mode, Context: ctx, TickEvery: -1, Logger: atptest.Quiet})
		return s, cancel, err
	}
	local, stop, err := open(atp.StateBolt)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode   string
		target error
		want   []string
	}{
		{atp.StateJetStream, state.ErrModeMismatch, []string{"served from its local file (atp-state.db) by pid", "--atp-state bolt", "--atp-state jetstream"}},
		{atp.StateBolt, holder.ErrHeld, []string{"is held by pid", "utpmesh worker --atp-state jetstream|bolt atp"}},
	} {
		if _, _, err := open(tc.mode); !errors.Is(err, tc.target) {
			t.Fatalf("a %s worker beside a local one: %v, want %v", tc.mode, err, tc.target)
		} else {
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not say %q", err, w)
				}
			}
		}
	}
	stop()
	<-local.Done() // closed: its lease is given up
	shared, _, err := open(atp.StateJetStream)
	if err != nil {
		t.Fatalf("the shared state after the local holder stopped: %v", err)
	}
	_ = shared
	if _, _, err := open(atp.StateBolt); !errors.Is(err, state.ErrModeMismatch) {
		t.Fatalf("a local worker beside the shared state: %v, want ErrModeMismatch", err)
	}
}
