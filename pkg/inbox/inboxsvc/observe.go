package inboxsvc

import (
	"context"
	"time"
)

// Outcomes of one report, as passed to Observer.ReportHandled.
const (
	// OutcomeAccepted: a new entry was stored and its wakeup sent (also
	// counted for an entry stored with its result card, Announce).
	OutcomeAccepted = "accepted"
	// OutcomeDuplicate: the call already had an entry; nothing new. On a
	// node whose inbox shares the CardStore's file the worker's report
	// of an entry stored with its result counts here.
	OutcomeDuplicate = "duplicate"
	// OutcomeStale: stored stale (an older turn_epoch); no wakeup.
	OutcomeStale = "stale"
	// OutcomeRefused: dead-lettered and terminated.
	OutcomeRefused = "refused"
	// OutcomeRetried: a transient failure; the report will be redelivered.
	OutcomeRetried = "retried"
)

// Observer receives the inbox's events, for metrics (pkg/metrics has a
// Prometheus implementation). Methods are called from many goroutines at
// once and must not block. A nil Config.Observer costs nothing.
type Observer interface {
	// ReportHandled: one delivery of a report ended with outcome (one of
	// the Outcome constants).
	ReportHandled(outcome string)
	// WakeupSent: a wakeup was published and recorded; lag is the time
	// from the tool.result card's created_at to now (how long the agent
	// waited for its doorbell, end to end from the worker's result).
	WakeupSent(lag time.Duration)
}

func (s *Service) observe(outcome string) {
	if s.cfg.Observer != nil {
		s.cfg.Observer.ReportHandled(outcome)
	}
}

// Pending returns how many entries are pending (stored, not yet
// acknowledged by their agent), across every project. It reads the pending
// index, so its cost grows with what is pending, not with history.
func (s *Service) Pending() (int, error) {
	st, err := s.backend()
	if err != nil {
		return 0, err
	}
	return st.Pending(context.Background())
}
