package atime

import (
	"errors"
	"strings"
	"testing"
)

func TestParseHM(t *testing.T) {
	for _, tc := range []struct {
		in       string
		allowEnd bool
		want     int
		ok       bool
	}{
		{"09:30", false, 570, true},
		{"00:00", false, 0, true},
		{"23:59", false, 1439, true},
		{"24:00", true, 1440, true},
		{"24:00", false, 0, false},
		{"24:01", true, 0, false},
		{"9:30", false, 0, false},
		{"09:60", false, 0, false},
		{"ab:cd", false, 0, false},
		{"", false, 0, false},
	} {
		got, err := ParseHM("start", tc.in, tc.allowEnd)
		if tc.ok != (err == nil) || (tc.ok && got != tc.want) {
			t.Errorf("ParseHM(%q, %v) = %d, %v", tc.in, tc.allowEnd, got, err)
		}
		if err != nil && (!errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "HH:MM")) {
			t.Errorf("error %v does not say what to type", err)
		}
		if err == nil && FormatHM(got) != tc.in {
			t.Errorf("FormatHM(%d) = %s", got, FormatHM(got))
		}
	}
}

func TestParseDate(t *testing.T) {
	for in, ok := range map[string]bool{"2024-01-15": true, "2024-02-30": false, "2024-1-15": false, "15/01/2024": false, "": false} {
		if _, err := ParseDate("date", in); ok != (err == nil) {
			t.Errorf("ParseDate(%q) err = %v", in, err)
		}
	}
	if _, err := ParseTimestamp("completed_at", "2024-01-15T14:00:00Z"); err != nil {
		t.Error(err)
	}
	if _, err := ParseTimestamp("completed_at", "2024-01-15 14:00"); err == nil {
		t.Error("bad timestamp accepted")
	}
}

func FuzzParseHM(f *testing.F) {
	for _, s := range []string{"09:30", "24:00", "", "99:99", "1:2:3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseHM("t", s, true)
		if err != nil {
			return
		}
		if m < 0 || m > 1440 || FormatHM(m) != s {
			t.Fatalf("ParseHM(%q) = %d", s, m)
		}
	})
}

func FuzzParseDate(f *testing.F) {
	for _, s := range []string{"2024-01-15", "2024-13-01", "", "0000-00-00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDate("date", s)
		if err == nil && d.Format(DateLayout) != s {
			t.Fatalf("ParseDate(%q) round-trips to %s", s, d.Format(DateLayout))
		}
	})
}
