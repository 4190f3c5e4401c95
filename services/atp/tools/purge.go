package tools

import (
	"context"
	"time"

	"github.com/utpmesh/utpmesh/services/toolkit"
)

// PurgeRecords deletes the service's call records older than
// toolkit.RecordMaxAge, by the real clock the records are stamped with
// (not Deps.Now, which tests move). Every worker runs it every
// Deps.PurgeEvery (purgeLoop); running it in several at once is safe.
func (s *Service) PurgeRecords(ctx context.Context) (toolkit.Purged, error) {
	return s.store.PurgeRecords(ctx, time.Now(), toolkit.RecordMaxAge)
}

// purgeLoop purges every every (Deps.PurgeEvery) until ctx ends or the
// service closes.
func (s *Service) purgeLoop(ctx context.Context, every time.Duration) {
	toolkit.PurgeLoop(ctx, s.done, every, s.deps.Logger, "atp call records", s.PurgeRecords)
}
