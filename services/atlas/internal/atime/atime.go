// Package atime parses the date and time-of-day forms ATLAS arguments use:
// dates "YYYY-MM-DD", times of day "HH:MM" (24-hour; "24:00" only as an end)
// and timestamps (RFC 3339). Every error names the field and shows the form
// to type instead.
package atime

import (
	"errors"
	"fmt"
	"time"
)

// ErrFormat is wrapped by every parse error.
var ErrFormat = errors.New("atime: bad format")

// DateLayout is the layout of ATLAS dates.
const DateLayout = "2006-01-02"

// ParseDate parses a YYYY-MM-DD date (midnight UTC).
func ParseDate(field, s string) (time.Time, error) {
	t, err := time.Parse(DateLayout, s)
	if err != nil || len(s) != len(DateLayout) {
		return time.Time{}, fmt.Errorf("%w: %s %q is not a date; use YYYY-MM-DD, e.g. 2024-01-15", ErrFormat, field, s)
	}
	return t, nil
}

// ParseTimestamp parses an RFC 3339 timestamp and returns it in UTC.
func ParseTimestamp(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %s %q is not a timestamp; use RFC 3339, e.g. 2024-01-15T14:00:00Z", ErrFormat, field, s)
	}
	return t.UTC(), nil
}

// ParseHM parses a time of day "HH:MM" into minutes after midnight. "24:00"
// (1440) is accepted only when allowEnd is set (the end of a block).
func ParseHM(field, s string, allowEnd bool) (int, error) {
	bad := func() (int, error) {
		return 0, fmt.Errorf("%w: %s %q is not a time of day; use HH:MM (24-hour), e.g. 09:30", ErrFormat, field, s)
	}
	if len(s) != 5 || s[2] != ':' {
		return bad()
	}
	d := func(c byte) int { return int(c - '0') }
	for _, i := range []int{0, 1, 3, 4} {
		if s[i] < '0' || s[i] > '9' {
			return bad()
		}
	}
	h, m := d(s[0])*10+d(s[1]), d(s[3])*10+d(s[4])
	if m > 59 || h > 24 || (h == 24 && (m != 0 || !allowEnd)) {
		return bad()
	}
	return h*60 + m, nil
}

// FormatHM writes minutes after midnight as HH:MM.
func FormatHM(min int) string { return fmt.Sprintf("%02d:%02d", min/60, min%60) }
