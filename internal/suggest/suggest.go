// Package suggest finds the "did you mean …?" candidate for a mistyped name:
// the candidate nearest by edit distance, when it is near enough to be a
// typo. The CLI uses it for flags and subcommands, pkg/authz for Cedar
// actions, entity types and attributes.
package suggest

import "strings"

// Nearest returns the candidate closest to s by Levenshtein distance, or ""
// when none is closer than limit edits (a distance of limit or more never
// matches). With foldCase, letters are compared ignoring case. Ties keep
// the earlier candidate.
func Nearest(s string, candidates []string, limit int, foldCase bool) string {
	key := s
	if foldCase {
		key = strings.ToLower(s)
	}
	best, bestD := "", limit
	for _, c := range candidates {
		cc := c
		if foldCase {
			cc = strings.ToLower(c)
		}
		if d := Distance(key, cc); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// Limit is the usual typo threshold for a name of n bytes: fewer than
// n/div+2 edits (div 2 is lenient, 3 strict).
func Limit(n, div int) int { return n/div + 2 }

// Distance is the Levenshtein edit distance between a and b, by bytes.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
