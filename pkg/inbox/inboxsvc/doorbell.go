package inboxsvc

import (
	"context"
	"time"

	"github.com/utpmesh/utpmesh/pkg/inbox"
)

// unrungLister is a backend that lists its pending entries whose wakeup is
// not marked sent, a page at a time (boltinbox.DB.Unrung): the ones a
// crash may have left without a stored wakeup.
type unrungLister interface {
	Unrung(ctx context.Context, after string, scan int, markedSince time.Time) (entries []inbox.Entry, next string, err error)
}

// unrungPage is how many keys of the pending index one read transaction
// of the start's scan reads.
const unrungPage = 256

// ringUnrung rings, one at a time, the wakeup of every pending entry of
// ul that has no wakeup-sent mark (or one at or after
// Config.RingMarkedSince) and was stored before the service started
// (since): on a node whose worker does not report a result the
// put stored with its entry, nothing else would ring a wakeup a crash
// lost between the entry's commit and the wakeup's publish. It uses the
// path of every wakeup (ring's publish, Nats-Msg-Id wakeup-<inbox_id>),
// so an entry whose wakeup was stored within the wakeup stream's
// duplicate window (two minutes) stores nothing new; later the agent may
// be woken twice, and its ack of the entry makes the second a no-op. It
// logs how many entries it rang.
func (s *Service) ringUnrung(ul unrungLister, since time.Time) {
	log := s.log.With("from", "start")
	rung, cursor := 0, ""
	for {
		page, next, err := ul.Unrung(s.baseCtx, cursor, unrungPage, s.cfg.RingMarkedSince)
		if err != nil {
			log.Error("inbox: cannot list the pending entries without a wakeup-sent mark; those not rung yet are rung at the next start (their agents find them in their pending lists)",
				"rung", rung, "err", err)
			return
		}
		for i := range page {
			e := &page[i]
			if !e.CreatedAt.Before(since) {
				continue // stored since the start: rung by its own report or result
			}
			select {
			case <-s.stopCh:
				log.Info("inbox: stopped while ringing the pending entries without a wakeup-sent mark; the next start goes on", "rung", rung)
				return
			default:
			}
			s.ringLater(s.entryLog(e, "start"), e, e.CreatedAt, nil, "", nil)
			rung++
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if rung > 0 {
		log.Info("inbox: rang the wakeups of pending entries stored before the start without a wakeup-sent mark", "entries", rung)
	} else {
		log.Debug("inbox: every pending entry stored before the start has its wakeup-sent mark")
	}
}

// startRinging starts ringUnrung in the background when the backend can
// list unmarked entries (a bbolt file; a key-value bucket's entries come
// with a worker's report, whose redelivery rings them). The caller holds
// s.mu.
func (s *Service) startRinging(since time.Time) {
	ul, ok := s.st.(unrungLister)
	if !ok {
		close(s.rung)
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(s.rung)
		s.ringUnrung(ul, since)
	}()
}
