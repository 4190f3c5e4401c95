package atlas_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/internal/atlastest"
	"github.com/utpmesh/utpmesh/services/atlas/tasks"
	"github.com/utpmesh/utpmesh/services/state"
)

// The finding of issue 24: a worker started with the replicated state
// joined a group served from its local file without a word, and
// TASK_LIST alternated between the two datasets. Mixed modes are refused
// both ways, with what to do.
func TestMixedStateModesRefused(t *testing.T) {
	for _, tc := range []struct {
		name         string
		first, other string
		want         []string
	}{
		{"jetstream joining a file group", atlas.StateBolt, atlas.StateJetStream,
			[]string{"served from its local file (atlas-tasks.db)", "--atlas-state bolt", "--atlas-state jetstream"}},
		{"bolt joining a bucket group", atlas.StateJetStream, atlas.StateBolt,
			[]string{"JetStream bucket atlas_tasks", "start it with utpmesh worker --atlas-state jetstream"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			h := atlastest.Start(t, ctx)
			deps := func(mode string) atlas.Deps {
				return atlas.Deps{NC: conn(t, h), Store: h.Mesh.Cards(), DataDir: t.TempDir(), State: mode, Context: ctx, Logger: atlastest.Quiet}
			}
			first, err := tasks.Open(deps(tc.first))
			if err != nil {
				t.Fatal(err)
			}
			_, err = tasks.Open(deps(tc.other))
			if !errors.Is(err, state.ErrModeMismatch) {
				t.Fatalf("a %s worker beside a %s one: %v, want ErrModeMismatch", tc.other, tc.first, err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q does not say %q", err, want)
				}
			}
			// A worker of the group's own mode still starts.
			if tc.first == atlas.StateJetStream {
				again, err := tasks.Open(deps(tc.first))
				if err != nil {
					t.Fatalf("a second jetstream worker: %v", err)
				}
				_ = again.Close()
			}
			// The bucket's mark outlives its workers: the group stays
			// replicated after every worker stopped.
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			if tc.first == atlas.StateJetStream {
				if _, err := tasks.Open(deps(atlas.StateBolt)); !errors.Is(err, state.ErrModeMismatch) {
					t.Fatalf("bolt after every jetstream worker stopped: %v, want ErrModeMismatch", err)
				}
			}
		})
	}
}
