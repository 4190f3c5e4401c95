package cron

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNext(t *testing.T) {
	base := time.Date(2024, 1, 15, 10, 30, 0, 0, time.UTC) // a Monday
	for _, tc := range []struct {
		expr, want string
	}{
		{"0 9 * * 1-5", "2024-01-16T09:00:00Z"},
		{"*/15 * * * *", "2024-01-15T10:45:00Z"},
		{"30 10 * * *", "2024-01-16T10:30:00Z"},
		{"0 0 1 * *", "2024-02-01T00:00:00Z"},
		{"0 12 * * 0", "2024-01-21T12:00:00Z"},
		{"0 12 * * 7", "2024-01-21T12:00:00Z"},
		{"0 0 29 2 *", "2024-02-29T00:00:00Z"},
		{"0 8 1 * 3", "2024-01-17T08:00:00Z"}, // dom OR dow
		{"5,10 11 * * *", "2024-01-15T11:05:00Z"},
	} {
		s, err := Parse(tc.expr)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		got, ok := s.Next(base)
		if !ok || got.Format(time.RFC3339) != tc.want {
			t.Errorf("Next(%q) = %v %v, want %s", tc.expr, got, ok, tc.want)
		}
	}
	if _, ok := mustParse(t, "0 0 31 2 *").Next(base); ok {
		t.Error("Feb 31 has a next time")
	}
}

func mustParse(t *testing.T, e string) *Schedule {
	s, err := Parse(e)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"0 9 * *", "want 5"},
		{"60 * * * *", "minute"},
		{"* 24 * * *", "hour"},
		{"* * 0 * *", "day of month"},
		{"* * * 13 *", "month"},
		{"* * * * 8", "day of week"},
		{"*/0 * * * *", "step"},
		{"a * * * *", "not a number"},
		{"5-1 * * * *", "out of range"},
	} {
		_, err := Parse(tc.expr)
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error about %s", tc.expr, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0 9 * * 1-5", "*/15 * * * *", "0 0 31 2 *", "1,2,3-9/2 * * * *", ""} {
		f.Add(s)
	}
	base := time.Date(2024, 1, 15, 10, 30, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := Parse(expr)
		if err != nil {
			return
		}
		if n, ok := s.Next(base); ok && !n.After(base) {
			t.Fatalf("Next(%q) = %v is not after %v", expr, n, base)
		}
	})
}
