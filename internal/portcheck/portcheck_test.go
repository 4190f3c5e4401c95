package portcheck_test

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/internal/portcheck"
)

func TestFree(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name   string
		addr   string
		inUse  bool
		errSub string // "" : free
	}{
		{"free port", "127.0.0.1:0", false, ""},
		{"busy port", busy.Addr().String(), true, "listen " + busy.Addr().String() + ": address already in use"},
		{"bad port", "127.0.0.1:99999", false, "listen 127.0.0.1:99999: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := portcheck.Free(tc.addr)
			if tc.errSub == "" {
				if err != nil {
					t.Fatalf("Free(%s) = %v, want nil", tc.addr, err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.errSub) || errors.Is(err, portcheck.ErrInUse) != tc.inUse {
				t.Fatalf("Free(%s) = %v, want %q (in use: %v)", tc.addr, err, tc.errSub, tc.inUse)
			}
		})
	}
}
