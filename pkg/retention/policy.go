package retention

import (
	"errors"
	"fmt"
	"time"
)

// Errors of this package. ErrInvalid wraps every bad argument; the
// message names it and what to use instead.
var (
	// ErrInvalid: a policy or argument breaks a rule.
	ErrInvalid = errors.New("retention: invalid")
)

// MinMaxAge is the shortest age limit a Policy takes: shorter would
// delete turns while their agents still work on them.
const MinMaxAge = time.Minute

// Policy is a project's retention policy. The zero Policy keeps every
// turn.
type Policy struct {
	// MaxAge removes a turn whose last card is older; 0: no age limit.
	MaxAge time.Duration `json:"max_age,omitempty"`
	// MaxBytes keeps the newest turns whose cards fit in MaxBytes and
	// removes the older ones; 0: no size limit.
	MaxBytes int64 `json:"max_bytes,omitempty"`
}

// Zero reports whether p keeps every turn.
func (p Policy) Zero() bool { return p.MaxAge == 0 && p.MaxBytes == 0 }

// Check validates p; the error names the field and what to use.
func (p Policy) Check() error {
	if p.MaxAge < 0 || (p.MaxAge > 0 && p.MaxAge < MinMaxAge) {
		return fmt.Errorf("%w: max_age %v: use 0 (no age limit) or at least %v, e.g. 720h for 30 days", ErrInvalid, p.MaxAge, MinMaxAge)
	}
	if p.MaxBytes < 0 {
		return fmt.Errorf("%w: max_bytes %d is negative: use 0 (no size limit) or a size in bytes", ErrInvalid, p.MaxBytes)
	}
	return nil
}

// String describes p for logs and the CLI.
func (p Policy) String() string {
	if p.Zero() {
		return "keep every turn"
	}
	s := ""
	if p.MaxAge > 0 {
		s = "max age " + p.MaxAge.String()
	}
	if p.MaxBytes > 0 {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("max %d bytes", p.MaxBytes)
	}
	return s
}
