package determ

import (
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
)

func TestIDsAreStableAndDistinct(t *testing.T) {
	a := ID("task", "demo", "call-1", 0)
	if a != ID("task", "demo", "call-1", 0) {
		t.Fatal("same input, different id")
	}
	for _, other := range []string{ID("task", "demo", "call-1", 1), ID("task", "demo2", "call-1", 0), ID("task", "demo", "call-2", 0)} {
		if other == a {
			t.Fatalf("collision: %s", a)
		}
	}
	if len(a) != len("task_")+16 {
		t.Fatalf("id %q has the wrong length", a)
	}
	if Hash(8, "ab", "c") == Hash(8, "a", "bc") {
		t.Fatal("parts are not separated")
	}
}

func TestCardIDIsAValidCardID(t *testing.T) {
	id := CardID("receipt", "demo", "turn", "call")
	if !card.ValidID(id) || id != CardID("receipt", "demo", "turn", "call") {
		t.Fatalf("CardID = %q", id)
	}
}

func TestFormat(t *testing.T) {
	tm := time.Date(2024, 1, 15, 11, 30, 0, 999, time.FixedZone("x", 3600))
	if got := Format(tm); got != "2024-01-15T10:30:00Z" {
		t.Fatalf("Format = %s", got)
	}
}
