package toolkit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/utpmesh/utpmesh/services/toolkit"
)

func TestLate(t *testing.T) {
	l := toolkit.NewLate()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Conn(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("unset Late, ended ctx: %v", err)
	}
	l.Set(nil, nil)
	if nc, st, err := l.Resolve(context.Background()); nc != nil || st != nil || err != nil {
		t.Fatalf("after Set: %v %v %v", nc, st, err)
	}
}
