package toolkit

import (
	"encoding/json"
	"time"

	"github.com/utpmesh/utpmesh/pkg/registry"
)

// PendingTTL is how long a pending confirmation (pkg/confirm) may be
// confirmed, counted from the original call's time.
const PendingTTL = 24 * time.Hour

// NeedsConfirm applies a confirmation rule to a call's arguments: always,
// or when_multiple when count says the call acts on more than one object
// (a nil count never does).
func NeedsConfirm(rule registry.Confirmation, count func(json.RawMessage) int, args json.RawMessage) bool {
	switch rule {
	case registry.ConfirmAlways:
		return true
	case registry.ConfirmWhenMultiple:
		return count != nil && count(args) > 1
	}
	return false
}

// Confirmable reports whether a rule can park a call.
func Confirmable(rule registry.Confirmation) bool {
	return rule == registry.ConfirmAlways || rule == registry.ConfirmWhenMultiple
}
