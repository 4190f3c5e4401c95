// Package booking is the ATP Booking Object: its data, its append-only
// event log and its state machine, kept in the state engine (package
// state: the KV bucket atp_state every ATP worker shares, or a local bbolt
// file), so bookings survive a restart and every worker sees them.
// ImportLegacy imports the atp.db file the service kept before, once.
//
// # State machine
//
// A booking's State is one of the eleven states of the public ATP Layer-3
// workflow model (INQUIRY, PENDING_CONFIRMATION, CONFIRMED, AMENDMENT,
// DISRUPTION_REVIEW, PARTY_UNRESPONSIVE, IN_JOURNEY, COMPLETION,
// BOOKING_CANCELLED, BOOKING_CANCELLED_SUSPENDED, and BOOKING_SUSPENDED,
// which is an overlay on another state: Booking.Suspended). The ATP tool
// catalogue names states differently (PRE_JOURNEY, JOURNEY, ...);
// ToolState maps one to the other and is what the Cedar gate sees as
// context.booking_state (Store implements atpauthz.States).
// docs/catalogues/atp.md has the mapping table and the transition table
// (Transitions) with the timeouts (Timeouts).
//
// Every change goes through one state transaction that also appends its
// event (a transaction that lost to another worker's commit runs again
// with fresh reads): a transition that the table does not list is refused
// (ErrIllegalTransition), and so is any transition while a HEM escalation
// is active on the booking (ErrHEMActive) or while it is suspended (except
// Resume and cancellation). Timeouts run on Store.Tick with the store's
// injectable clock; a suspended booking or one with an active HEM
// escalation runs no clock.
//
// # Event log
//
// Each booking has its own bucket of events, events/<id>, keyed by its
// sequence number (Booking.EventCount + 1, as 16 hex digits); the package
// only ever appends to it, never rewrites or deletes an entry.
//
// # Call records
//
// A state-changing tool call runs with a Record in its ctx (WithRecord):
// the store's first write transaction under that ctx stores the call's
// record (its result, under its turn and tool_call_id, in BucketCalls)
// with the change, and refuses to run (ErrRecorded) when the record is
// there already. A repeat of the call answers from Store.Recorded, so a
// change is applied once even when a commit's outcome was unknown.
// Store.PurgeRecords deletes the records once they are old (purge.go).
package booking
