// Package retention keeps a project's turns from growing without bound:
// a per-project Policy (an age limit, a size limit, or both) that a
// Sweeper applies by archiving each turn past the limit (its cards, in
// replay order, as JSON lines) and then deleting it from the CardStore
// and the inbox.
//
// What a sweep removes, per project:
//
//   - a turn whose last card is older than Policy.MaxAge (by the
//     sweeper's clock);
//   - with Policy.MaxBytes, the oldest turns beyond the newest ones whose
//     cards (cardstore.TurnInfo.Bytes) fit in MaxBytes.
//
// What it never removes, logged and counted in Report.Kept:
//
//   - a turn with a call that has no result (ToolCalls > ToolResults: the
//     call is running, waiting for a human, or abandoned mid-way), or with
//     a live claim (cardstore.ErrClaimHeld);
//   - a turn with a pending inbox entry: a result its agent has not
//     consumed yet (inbox.ErrPending).
//
// Order of one turn's removal: read its cards and check their claims;
// delete its inbox entries (acked and stale: pointers to the cards; a
// pending one stops here, before anything is archived); append the cards
// to the archive and sync it; delete the cards. A sweep cut short after
// the archive write archives the turn again the next time: an archive
// may hold a turn twice, and card ids tell the copies apart.
//
// In a cluster every node runs a Sweeper; a project's sweep holds the
// CardStore claim "retention/<project>" while it runs, so one node sweeps
// a project at a time.
//
// A MarkerPurger (markers.go) removes the old delete markers that KV
// deletes leave in the catalogues' state buckets and the inbox bucket:
// workers may not purge a stream, so the core does, on a schedule.
package retention
