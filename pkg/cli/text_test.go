package cli_test

import (
	"testing"

	"github.com/utpmesh/utpmesh/pkg/cli"
)

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		n        int
		want     string
	}{
		{"short", "abc", 5, "abc"},
		{"exact", "abcde", 5, "abcde"},
		{"long", "abcdef", 5, "abcd…"},
		{"white space joined", " a\n\tb  c ", 10, "a b c"},
		{"runes, not bytes", "ééééé", 4, "ééé…"},
		{"empty", "", 3, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cli.Cut(tc.in, tc.n); got != tc.want {
				t.Fatalf("Cut(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
		})
	}
}
