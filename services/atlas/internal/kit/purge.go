package kit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/services/toolkit"
)

// pendingRecords is the Aged of the pending confirmations: a Pending's
// time is its call's (Origin.Time), and it expires toolkit.PendingTTL
// after it, long before toolkit.RecordMaxAge.
var pendingRecords = toolkit.Aged{Bucket: bucketPending, Time: func(v []byte) (time.Time, error) {
	var p struct {
		Origin struct {
			Time string `json:"time"`
		} `json:"origin"`
	}
	if err := json.Unmarshal(v, &p); err != nil {
		return time.Time{}, fmt.Errorf("%w: pending confirmation: %w", toolkit.ErrRecord, err)
	}
	at, err := time.Parse(time.RFC3339, p.Origin.Time)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: pending confirmation: origin time %q: %w", toolkit.ErrRecord, p.Origin.Time, err)
	}
	return at, nil
}}

// PurgeRecords deletes, in every project of the group, the call records
// (_calls) and pending confirmations (_pending) stored more than
// toolkit.RecordMaxAge ago by the real clock, and stamps call records an
// earlier version wrote without a time (toolkit.Purge). A worker that may
// not serve the group's local state purges nothing (Refused's error). Receipts
// are cards in their call's turn: turn retention (pkg/retention) removes
// them.
func (s *Service) PurgeRecords(ctx context.Context) (toolkit.Purged, error) {
	if err := s.Refused(); err != nil {
		return toolkit.Purged{}, err
	}
	p, err := toolkit.Purge(ctx, s.st, time.Now(), toolkit.RecordMaxAge, toolkit.CallRecords(bucketCalls), pendingRecords)
	if err != nil {
		return p, fmt.Errorf("atlas.%s: %w", s.group, err)
	}
	return p, nil
}

// purgeLoop purges every every (Deps.PurgeEvery) until ctx ends or the
// service closes; while the service is refused its state (Refused) it
// skips the runs: the holder purges.
func (s *Service) purgeLoop(ctx context.Context, every time.Duration) {
	toolkit.PurgeLoop(ctx, s.done, every, s.log, "atlas."+s.group+" call records", func(ctx context.Context) (toolkit.Purged, error) {
		if s.Refused() != nil {
			return toolkit.Purged{}, nil
		}
		return s.PurgeRecords(ctx)
	})
}
