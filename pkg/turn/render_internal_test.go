package turn

import (
	"strings"
	"testing"
)

// TestInline: the one-line check that spares most values strings.Fields
// gives inline the same result as always taking the long way.
func TestInline(t *testing.T) {
	long := strings.Repeat("é", MaxInline)
	for _, s := range []string{
		"", "x", `{"x":1}`, "a b", "a  b", " a", "a ", "a\tb", "a\nb", "a\r\nb", "a\vb\fc",
		"a\u00a0b", "a\u0085b", "a\u2003b", "caf\xe9 x", "é è", long, long + " x",
	} {
		want := strings.Join(strings.Fields(s), " ")
		if len(want) > MaxInline {
			want = inlineSlow(want)
		}
		if got := inline(s); got != want {
			t.Errorf("inline(%q) = %q, want %q", s, got, want)
		}
	}
}

// inlineSlow cuts like inline, for the expected values.
func inlineSlow(s string) string {
	cut := MaxInline
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
