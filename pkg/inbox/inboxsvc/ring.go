package inboxsvc

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/utpmesh/utpmesh/internal/gopool"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/telemetry"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// flight is the publish of one entry's wakeup: from the moment a handler
// (a report's, or Announce's) takes it on until its wakeup-sent mark is
// committed, when reads of the entry show the mark. A report of the entry
// meanwhile waits for it instead of publishing again: once done is closed
// with err nil, the wakeup is stored.
type flight struct {
	done chan struct{}
	err  error // set before done is closed
}

// flightKey names an entry among the flights.
func flightKey(e *inbox.Entry) string { return e.ProjectID + "\x00" + e.InboxID }

// takeFlight returns the entry's flight and whether the caller owns it
// (it was not in flight: the caller publishes and lands it).
func (s *Service) takeFlight(e *inbox.Entry) (*flight, bool) {
	k := flightKey(e)
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if f := s.flights[k]; f != nil {
		return f, false
	}
	f := &flight{done: make(chan struct{})}
	s.flights[k] = f
	return f, true
}

// landFlight ends the publish of f with err; a failed one leaves the
// flights at once, so the next report publishes again.
func (s *Service) landFlight(e *inbox.Entry, f *flight, err error) {
	f.err = err
	close(f.done)
	if err != nil {
		s.dropFlight(e, f)
	}
}

// dropFlight removes f, once reads show the entry's mark (or it failed).
func (s *Service) dropFlight(e *inbox.Entry, f *flight) {
	k := flightKey(e)
	s.fmu.Lock()
	if s.flights[k] == f {
		delete(s.flights, k)
	}
	s.fmu.Unlock()
}

// needsWakeup decides what a stored entry calls for: nothing (a stale new
// entry, or one that is not pending or whose wakeup is recorded) or its
// wakeup. It logs and counts the first two.
func (s *Service) needsWakeup(log *slog.Logger, e *inbox.Entry, created bool) bool {
	switch {
	case created && e.State == inbox.StateStale:
		log.Info("inbox: stale report stored; no wakeup", "state", e.State)
		s.observe(OutcomeStale)
		return false
	case !created && (e.State != inbox.StatePending || e.WakeupSentAt != nil):
		log.Debug("inbox: duplicate report acknowledged", "state", e.State)
		s.observe(OutcomeDuplicate)
		return false
	}
	return true
}

// ring takes a report's stored entry to its end: a pending entry's wakeup
// published (or known to be: another handler's publish of it succeeded)
// before it returns nil. It is the tail of every report (process), and
// Announce's publish is the same publish.
func (s *Service) ring(ctx context.Context, log *slog.Logger, in nats.Header, e *inbox.Entry, created bool, resultAt time.Time) error {
	if !s.needsWakeup(log, e, created) {
		return nil
	}
	for {
		f, mine := s.takeFlight(e)
		if mine {
			if !created {
				log.Info("inbox: duplicate report of an entry whose wakeup is not known to be published; publishing it")
			}
			if err := s.publish(ctx, log, in, e, resultAt, f, nil); err != nil {
				return err
			}
			if created {
				s.observe(OutcomeAccepted)
			} else {
				s.observe(OutcomeDuplicate)
			}
			return nil
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if f.err == nil {
			log.Debug("inbox: report of an entry whose wakeup is published; acknowledged")
			s.observe(OutcomeDuplicate)
			return nil
		}
		// That publish failed (and left): publish it ourselves.
	}
}

// publish publishes e's wakeup and waits for JetStream's PubAck, lands f,
// and queues the wakeup-sent mark, which rides along with the next
// transaction instead of paying an fsync of its own (nothing waits for
// it); f leaves the flights once the mark is committed. A duplicate that
// raced the first handler before it took f re-publishes the same wakeup
// (JetStream drops it by Nats-Msg-Id); only the mark that was first
// counts, so one entry is one wakeup.
func (s *Service) publish(ctx context.Context, log *slog.Logger, in nats.Header, e *inbox.Entry, resultAt time.Time, f *flight, rc json.RawMessage) error {
	err := s.publishWakeup(ctx, in, e, rc)
	s.landFlight(e, f, err)
	if err != nil {
		log.Warn("inbox: cannot publish the wakeup; retrying", "err", err)
		return err
	}
	now := time.Now()
	lag := now.Sub(resultAt)
	s.st.MarkSentLater(e.ProjectID, e.InboxID, now, func(first bool, err error) {
		s.dropFlight(e, f)
		if err != nil {
			log.Warn("inbox: wakeup published but not recorded; a redelivered report or the next start re-publishes it", "err", err)
			return
		}
		if first && s.cfg.Observer != nil {
			s.cfg.Observer.WakeupSent(lag)
		}
	})
	log.Info("inbox: report accepted; wakeup sent", "status", e.Status, "after_execution", e.AfterExecution, "lag", lag)
	return nil
}

// Announce rings the wakeup of an entry stored in the transaction of its
// tool.result card (boltinbox's ResultHook on a node whose inbox shares
// the CardStore's file; it implements boltinbox.Announcer). It returns at
// once: the publish runs in the background (ringLater), and a report of
// the entry that arrives meanwhile (a foreign worker's, or a re-report)
// waits for it rather than publishing again, then answers. A new entry
// whose wakeup is published counts as OutcomeAccepted. The worker is
// told the entry is stored and does not report it, so a failed publish
// is retried until it succeeds or the service stops. After Stop it does
// nothing: the entry stays without its mark, and the next Start rings it
// (ringUnrung).
func (s *Service) Announce(e *inbox.Entry, created bool, result *card.Card, data []byte) {
	log := s.entryLog(e, "result")
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		log.Debug("inbox: stopped; the entry's wakeup is left to the next start")
		return
	}
	if !s.needsWakeup(log, e, created) {
		s.mu.Unlock()
		return
	}
	f, mine := s.takeFlight(e)
	if !mine {
		s.mu.Unlock()
		return // a report's handler publishes it
	}
	s.wg.Add(1)
	s.mu.Unlock()
	outcome := OutcomeDuplicate
	if created {
		outcome = OutcomeAccepted
	}
	gopool.Go(func() {
		defer s.wg.Done()
		s.ringLater(log, e, result.CreatedAt, f, outcome, wakeupCard(data))
	})
}

// entryLog is the service's logger with the fields of entry e; from says
// who rings it ("result", "start").
func (s *Service) entryLog(e *inbox.Entry, from string) *slog.Logger {
	return s.log.With("project_id", e.ProjectID, "channel_id", e.ChannelID, "agent_id", e.AgentID,
		"agent_turn_id", e.AgentTurnID, "tool_call_id", e.ToolCallID, "tool_name", e.ToolName,
		"turn_epoch", e.TurnEpoch, "tool_result_card_id", e.ToolResultCardID, "inbox_id", e.InboxID, "from", from)
}

// Bounds of ringLater's retries of a failed publish.
const (
	ringRetryFirst = time.Second
	ringRetryMax   = 30 * time.Second
)

// ringLater publishes e's wakeup on the path every report takes (publish,
// the flights), owning flight f when it is not nil, and retries a failed
// publish, waiting ringRetryFirst, doubling up to ringRetryMax, until it
// is stored (by this or another handler's publish) or the service stops.
// Once stored it counts outcome (none when ""). It is the tail of Announce
// and of the start's ringing of unmarked entries; the caller has added it
// to s.wg.
func (s *Service) ringLater(log *slog.Logger, e *inbox.Entry, resultAt time.Time, f *flight, outcome string, rc json.RawMessage) {
	wait := ringRetryFirst
	for {
		if f == nil {
			var mine bool
			if f, mine = s.takeFlight(e); !mine {
				select {
				case <-f.done:
				case <-s.stopCh:
					return
				}
				if f.err == nil {
					return // another handler's publish stored it
				}
				f = nil
				continue
			}
		}
		if s.ringOnce(log, e, resultAt, f, rc) == nil {
			if outcome != "" {
				s.observe(outcome)
			}
			return
		}
		f = nil // publish landed it failed and dropped it
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.stopCh:
			t.Stop()
			log.Warn("inbox: stopped before the wakeup was stored; the next start rings it")
			return
		}
		wait = min(2*wait, ringRetryMax)
	}
}

// ringOnce is one publish of e's wakeup under flight f, in a utp.wakeup
// span of the entry's trace.
func (s *Service) ringOnce(log *slog.Logger, e *inbox.Entry, resultAt time.Time, f *flight, rc json.RawMessage) error {
	ctx, cancel := context.WithTimeout(s.baseCtx, s.cfg.AckWait)
	defer cancel()
	h := nats.Header{}
	h.Set(utp.HeaderTraceparent, e.Traceparent)
	ctx, span := s.tr.Start(telemetry.Extract(ctx, h), telemetry.SpanWakeup, trace.WithSpanKind(trace.SpanKindInternal))
	defer span.End()
	span.SetAttributes(telemetry.AttrToolName.String(e.ToolName), telemetry.AttrToolCallID.String(e.ToolCallID),
		telemetry.AttrAgentTurnID.String(e.AgentTurnID), telemetry.AttrProjectID.String(e.ProjectID),
		telemetry.AttrStatus.String(string(e.Status)))
	return s.publish(ctx, log, nil, e, resultAt, f, rc)
}

// WakeupCardMax is the size of the largest tool.result card a wakeup
// carries (utp.Wakeup.ResultCard): a wakeup rung from a result's commit
// (Announce) carries the card when it is at most this long, so the agent
// need not read it; others point at it only.
const WakeupCardMax = 16 << 10

// wakeupCard returns the stored card data a wakeup carries, or nil.
func wakeupCard(data []byte) json.RawMessage {
	if len(data) == 0 || len(data) > WakeupCardMax {
		return nil
	}
	return data
}
