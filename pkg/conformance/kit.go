package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Errors of the kit.
var (
	// ErrConfig: the kit was configured wrongly (what is missing is named).
	ErrConfig = errors.New("conformance: bad configuration")
	// ErrNotReady: the implementation never became ready (not registered or
	// not discoverable in time).
	ErrNotReady = errors.New("conformance: the implementation is not ready")
)

// Outcome is a case's verdict.
type Outcome string

// The verdicts.
const (
	Pass Outcome = "PASS"
	Fail Outcome = "FAIL"
	// Skip: the case could not run in this configuration (the detail says
	// what it needs); it does not fail the run.
	Skip Outcome = "SKIP"
)

// Result is one case's verdict.
type Result struct {
	// Case is the case's name, e.g. "success".
	Case string `json:"case"`
	// Section is the docs/protocol.md section the case proves, e.g. "§7.5".
	Section string `json:"section"`
	// Outcome is PASS, FAIL or SKIP.
	Outcome Outcome `json:"outcome"`
	// Detail says what was observed (or what was wrong).
	Detail string `json:"detail"`
	// DurationNS is how long the case took.
	DurationNS time.Duration `json:"duration_ns"`
}

// Failed reports whether any result is a FAIL.
func Failed(rs []Result) bool {
	for _, r := range rs {
		if r.Outcome == Fail {
			return true
		}
	}
	return false
}

// Line is the result as one line: `PASS <case> (§x.y) <detail>`.
func (r Result) Line() string {
	return fmt.Sprintf("%s %s (%s) %s", r.Outcome, r.Case, r.Section, r.Detail)
}

// Print writes the results, one line each, or as a JSON array with asJSON.
func Print(w io.Writer, rs []Result, asJSON bool) error {
	if asJSON {
		if rs == nil {
			rs = []Result{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rs)
	}
	for _, r := range rs {
		if _, err := fmt.Fprintln(w, r.Line()); err != nil {
			return err
		}
	}
	return nil
}

// jsonEqual reports whether a and b hold the same JSON value.
func jsonEqual(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return bytes.Equal(a, b)
	}
	ca, _ := json.Marshal(va)
	cb, _ := json.Marshal(vb)
	return bytes.Equal(ca, cb)
}

func passf(format string, a ...any) (Outcome, string) { return Pass, fmt.Sprintf(format, a...) }
func failf(format string, a ...any) (Outcome, string) { return Fail, fmt.Sprintf(format, a...) }
