// Package cron parses five-field cron expressions and computes their next
// run time.
//
// Fields: minute (0-59), hour (0-23), day of month (1-31), month (1-12),
// day of week (0-7, 0 and 7 are Sunday). Each field is "*", a number, a
// range "a-b", a step "*/n" or "a-b/n", or a comma list of these. As in
// Vixie cron, when both day of month and day of week are restricted a day
// matching either runs. Names (JAN, MON) and macros (@daily) are not
// accepted. Times are computed in the location of the time passed to Next.
package cron

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrSyntax is wrapped by every parse error.
var ErrSyntax = errors.New("cron: bad expression")

// Schedule is a parsed expression.
type Schedule struct {
	min, hour, dom, month, dow uint64 // bit sets
	domAny, dowAny             bool
	expr                       string
}

var fields = []struct {
	name     string
	lo, hi   int
	examples string
}{
	{"minute", 0, 59, "0, */15, 0-30/5"},
	{"hour", 0, 23, "9, 9-17, */2"},
	{"day of month", 1, 31, "1, 1-15, */2"},
	{"month", 1, 12, "1, 1-6, */3"},
	{"day of week", 0, 7, "1-5 (Mon-Fri), 0 (Sunday)"},
}

// Parse parses an expression like "0 9 * * 1-5".
func Parse(expr string) (*Schedule, error) {
	parts := strings.Fields(expr)
	if len(parts) != 5 {
		return nil, fmt.Errorf("%w: %q has %d fields; want 5: minute hour day-of-month month day-of-week, e.g. \"0 9 * * 1-5\"", ErrSyntax, expr, len(parts))
	}
	var sets [5]uint64
	for i, p := range parts {
		set, err := parseField(p, i)
		if err != nil {
			return nil, err
		}
		sets[i] = set
	}
	s := &Schedule{min: sets[0], hour: sets[1], dom: sets[2], month: sets[3], dow: sets[4], expr: strings.Join(parts, " ")}
	if s.dow&(1<<7) != 0 {
		s.dow |= 1
	}
	s.domAny, s.dowAny = parts[2] == "*", parts[4] == "*"
	return s, nil
}

func parseField(p string, i int) (uint64, error) {
	f := fields[i]
	bad := func(why string) (uint64, error) {
		return 0, fmt.Errorf("%w: %s field %q: %s (allowed %d-%d, e.g. %s)", ErrSyntax, f.name, p, why, f.lo, f.hi, f.examples)
	}
	var set uint64
	for _, item := range strings.Split(p, ",") {
		rng, stepS, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepS)
			if err != nil || n < 1 || n > f.hi {
				return bad("step must be a positive number")
			}
			step = n
		}
		lo, hi := f.lo, f.hi
		switch {
		case rng == "*":
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			x, err1 := strconv.Atoi(a)
			y, err2 := strconv.Atoi(b)
			if err1 != nil || err2 != nil {
				return bad("not a number range")
			}
			lo, hi = x, y
		default:
			x, err := strconv.Atoi(rng)
			if err != nil {
				return bad("not a number")
			}
			lo, hi = x, x
			if hasStep {
				hi = f.hi
			}
		}
		if lo < f.lo || hi > f.hi || lo > hi {
			return bad("out of range")
		}
		for v := lo; v <= hi; v += step {
			set |= 1 << uint(v)
		}
	}
	return set, nil
}

// String is the normalized expression.
func (s *Schedule) String() string { return s.expr }

// maxSearch bounds Next: an expression that matches no real date (e.g.
// "0 0 31 2 *") has no next time.
const maxSearch = 5 * 366 * 24 * time.Hour

// Next returns the first matching minute strictly after t, in t's
// location; ok is false when none exists within five years.
func (s *Schedule) Next(t time.Time) (next time.Time, ok bool) {
	t = t.Truncate(time.Minute).Add(time.Minute)
	end := t.Add(maxSearch)
	for t.Before(end) {
		if s.month&(1<<uint(t.Month())) == 0 {
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, t.Location())
			continue
		}
		if !s.dayMatches(t) {
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, t.Location())
			continue
		}
		if s.hour&(1<<uint(t.Hour())) == 0 {
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour()+1, 0, 0, 0, t.Location())
			continue
		}
		if s.min&(1<<uint(t.Minute())) == 0 {
			t = t.Add(time.Minute)
			continue
		}
		return t, true
	}
	return time.Time{}, false
}

func (s *Schedule) dayMatches(t time.Time) bool {
	dom := s.dom&(1<<uint(t.Day())) != 0
	dow := s.dow&(1<<uint(t.Weekday())) != 0
	switch {
	case s.domAny && s.dowAny:
		return true
	case s.domAny:
		return dow
	case s.dowAny:
		return dom
	}
	return dom || dow
}
