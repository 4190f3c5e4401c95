package cli

import "strings"

// Cut shortens s for one line of a table or a message: runs of white space
// (newlines included) become one space, and a result longer than n runes is
// cut to n-1 runes and "…" (n runes in all). n must be at least 1.
func Cut(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
