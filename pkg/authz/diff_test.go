package authz

import "testing"

// TestDiffPolicies checks the line diff shown before a policy set is
// replaced.
func TestDiffPolicies(t *testing.T) {
	tests := []struct {
		name, old, new, want string
	}{
		{"identical", "a\nb\n", "a\nb\n", ""},
		{"from nothing", "", "a\nb\n", "@@ stored line 1, new line 1 @@\n+ a\n+ b\n"},
		{"one line changed", "a\nb\nc\nd\ne\nf\ng\n", "a\nb\nc\nX\ne\nf\ng\n",
			"@@ stored line 2, new line 2 @@\n  b\n  c\n- d\n+ X\n  e\n  f\n"},
		{"two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n", "1\nA\n3\n4\n5\n6\n7\n8\nB\n10\n",
			"@@ stored line 1, new line 1 @@\n  1\n- 2\n+ A\n  3\n  4\n@@ stored line 7, new line 7 @@\n  7\n  8\n- 9\n+ B\n  10\n"},
		{"removed at end", "a\nb\n", "a", "@@ stored line 1, new line 1 @@\n  a\n- b\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DiffPolicies(tc.old, tc.new); got != tc.want {
				t.Fatalf("DiffPolicies =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}
