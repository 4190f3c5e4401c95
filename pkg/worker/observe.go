package worker

import (
	"sync/atomic"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// Observer receives the runtime's events, for metrics (pkg/metrics has a
// Prometheus implementation). Every method is called on the call path, from
// many goroutines at once: implementations must be safe for concurrent use
// and must not block. A nil Config.Observer costs nothing.
//
// tool is always the name of a tool the runtime serves, or "" for a command
// on a PMO subject naming no served built-in (dead-lettered), so a label made
// from it has bounded cardinality.
type Observer interface {
	// ExecuteStarted: a call's handler is about to run (in flight +1).
	ExecuteStarted(tool string)
	// ExecuteFinished: the handler returned after d (in flight -1).
	ExecuteFinished(tool string, d time.Duration)
	// Completed: the runtime wrote a new tool.result card for a call, with
	// status and, unless the status is success or partial, the error code;
	// d runs from the delivery's arrival to the card being written.
	// Re-reports of an existing result are not counted.
	Completed(tool string, status card.Status, code card.ErrorCode, d time.Duration)
	// Redelivered: a command arrived for at least the second time.
	Redelivered(tool string)
	// ClaimTakenOver: this process took over the claim of a call whose
	// previous holder stopped renewing it (it died or stalled).
	ClaimTakenOver(tool string)
	// DeadLettered: a command that could not be answered with a result was
	// recorded on the dead-letter subject.
	DeadLettered(tool string)
	// Poisoned: a call reached its poison limit and was failed without
	// running (see Config.MaxDeliveries).
	Poisoned(tool string)
}

// ToolStats are one tool's counters in this process since Start; they are
// what the discovery service's STATS data carries (see Runtime.Stats).
type ToolStats struct {
	// Calls counts the results this process wrote (every status).
	Calls uint64 `json:"calls"`
	// Failed counts the results whose status is neither success nor partial
	// (failed, timeout, canceled).
	Failed uint64 `json:"failed"`
	// InFlight is the number of handlers running now.
	InFlight int64 `json:"in_flight"`
	// Redelivered counts deliveries after the first.
	Redelivered uint64 `json:"redelivered"`
	// ClaimTakeovers counts calls taken over from a worker that stopped
	// renewing its claim.
	ClaimTakeovers uint64 `json:"claim_takeovers"`
}

// toolStats is ToolStats with atomic fields.
type toolStats struct {
	calls, failed, redelivered, takeovers atomic.Uint64
	inFlight                              atomic.Int64
}

func (s *toolStats) snapshot() ToolStats {
	return ToolStats{
		Calls: s.calls.Load(), Failed: s.failed.Load(), InFlight: s.inFlight.Load(),
		Redelivered: s.redelivered.Load(), ClaimTakeovers: s.takeovers.Load(),
	}
}

// Stats returns the counters of every served tool (built-ins included), by
// tool name.
func (r *Runtime) Stats() map[string]ToolStats {
	out := make(map[string]ToolStats, len(r.stats))
	for name, s := range r.stats {
		out[name] = s.snapshot()
	}
	return out
}

// The event helpers below update the per-tool counters and forward to the
// Observer. r.stats is built in New and never changes, so reading it needs
// no lock.

func (r *Runtime) statsOf(tool string) *toolStats { return r.stats[tool] }

func (r *Runtime) onExecuteStart(tool string) {
	if s := r.statsOf(tool); s != nil {
		s.inFlight.Add(1)
	}
	if r.obs != nil {
		r.obs.ExecuteStarted(tool)
	}
}

func (r *Runtime) onExecuteEnd(tool string, d time.Duration) {
	if s := r.statsOf(tool); s != nil {
		s.inFlight.Add(-1)
	}
	if r.obs != nil {
		r.obs.ExecuteFinished(tool, d)
	}
}

func (r *Runtime) onCompleted(tool string, status card.Status, code card.ErrorCode, d time.Duration) {
	if s := r.statsOf(tool); s != nil {
		s.calls.Add(1)
		if status != card.StatusSuccess && status != card.StatusPartial {
			s.failed.Add(1)
		}
	}
	if r.obs != nil {
		r.obs.Completed(tool, status, code, d)
	}
}

func (r *Runtime) onRedelivered(tool string) {
	if s := r.statsOf(tool); s != nil {
		s.redelivered.Add(1)
	}
	if r.obs != nil {
		r.obs.Redelivered(tool)
	}
}

func (r *Runtime) onTakeover(tool string) {
	if s := r.statsOf(tool); s != nil {
		s.takeovers.Add(1)
	}
	if r.obs != nil {
		r.obs.ClaimTakenOver(tool)
	}
}

func (r *Runtime) onDeadLetter(tool string) {
	if r.obs != nil {
		r.obs.DeadLettered(tool)
	}
}

func (r *Runtime) onPoisoned(tool string) {
	if r.obs != nil {
		r.obs.Poisoned(tool)
	}
}
