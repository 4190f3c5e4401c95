package suggest_test

import (
	"fmt"
	"testing"

	"github.com/utpmesh/utpmesh/internal/suggest"
)

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "ab", 2}, {"kitten", "sitting", 3},
		{"TASK_LST", "TASK_LIST", 1}, {"args", "agrs", 2}, {"same", "same", 0},
	} {
		if got := suggest.Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestNearest(t *testing.T) {
	names := []string{"TASK_LIST", "TASK_CREATE", "NOTE_GET"}
	for _, c := range []struct {
		s      string
		div    int
		fold   bool
		want   string
		ofWhat string
	}{
		{"TASK_LST", 3, false, "TASK_LIST", "one deletion"},
		{"task_list", 3, true, "TASK_LIST", "case folded"},
		{"task_list", 3, false, "", "case kept: too far"},
		{"WORKFLOW_RUN", 3, false, "", "nothing near"},
		{"NOTE_GT", 1, false, "NOTE_GET", "lenient"},
	} {
		if got := suggest.Nearest(c.s, names, suggest.Limit(len(c.s), c.div), c.fold); got != c.want {
			t.Errorf("%s: Nearest(%q) = %q, want %q", c.ofWhat, c.s, got, c.want)
		}
	}
}

func ExampleNearest() {
	fmt.Println(suggest.Nearest("--agrs", []string{"--args", "--agent", "--json"}, suggest.Limit(len("--agrs"), 2), false))
	// Output: --args
}
