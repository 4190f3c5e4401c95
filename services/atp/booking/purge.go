package booking

import (
	"context"
	"time"

	"github.com/utpmesh/utpmesh/services/toolkit"
)

// PurgeRecords deletes the call records (BucketCalls) of every project
// stored before now - maxAge (toolkit.RecordMaxAge in the service), and
// gives a record an earlier version wrote without a time the time now, so
// it goes one max age later (toolkit.Purge). A call whose record is gone
// is answered from its result card, which the CardStore keeps as long as
// the turn's retention does.
func (s *Store) PurgeRecords(ctx context.Context, now time.Time, maxAge time.Duration) (toolkit.Purged, error) {
	p, err := toolkit.Purge(ctx, s.st, now, maxAge, toolkit.CallRecords(BucketCalls))
	return p, s.err(err)
}
