package authz

import (
	"fmt"
	"time"
)

// ProjectRetention is a project's retention policy for turns as the
// project's configuration stores it; pkg/retention applies it. Both
// limits empty (or the field nil) keep every turn.
type ProjectRetention struct {
	// MaxAge removes turns whose last card is older: a Go duration
	// ("720h" for 30 days), at least one minute; "" for no age limit.
	MaxAge string `json:"max_age,omitempty"`
	// MaxBytes keeps the newest turns whose cards fit in it; 0 for no
	// size limit.
	MaxBytes int64 `json:"max_bytes,omitempty"`
}

// Age returns MaxAge parsed (0 when empty).
func (r *ProjectRetention) Age() (time.Duration, error) {
	if r == nil || r.MaxAge == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(r.MaxAge)
	if err != nil {
		return 0, fmt.Errorf("%w: retention.max_age %q is not a duration; use e.g. 720h (30 days) or 90m", ErrInvalidRequest, r.MaxAge)
	}
	if d < time.Minute {
		return 0, fmt.Errorf("%w: retention.max_age %q is shorter than 1m; use at least 1m, e.g. 720h (30 days)", ErrInvalidRequest, r.MaxAge)
	}
	return d, nil
}

// check validates r (nil is valid).
func (r *ProjectRetention) check() error {
	if r == nil {
		return nil
	}
	if _, err := r.Age(); err != nil {
		return err
	}
	if r.MaxBytes < 0 {
		return fmt.Errorf("%w: retention.max_bytes %d is negative; use 0 (no size limit) or a size in bytes", ErrInvalidRequest, r.MaxBytes)
	}
	return nil
}
