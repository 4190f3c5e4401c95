// Package atp holds what the ATP tool service shares: its dependencies
// (Deps), where it keeps its state, and the booking-state handle the Cedar
// gate uses (StatesFor).
//
// ATP is the activity-travel catalogue specified by the ATP seeds (tool
// catalogue, section 4, and the Windley Loop addendum). Its tools act on
// Booking Objects (package booking): the eight tools of the seed and the
// operators' booking tools, all in one service "atp" (utpmesh worker atp)
// because they share one state in the state engine (package state): the
// JetStream KV bucket atp_state that every worker of the service shares
// (the default, StateJetStream), or a local bbolt file for one worker
// (StateBolt). An atp.db written by an earlier version is imported once:
//
//	atp_get_context_package        CONTEXT_READ           ATPAction::"get_context_package"
//	atp_notify_traveller           NOTIFICATION_SEND      ATPAction::"notify_traveller"
//	atp_update_pre_arrangement     PRE_ARRANGEMENT_WRITE  ATPAction::"update_pre_arrangement"
//	atp_collect_pre_arrangement_data PRE_ARRANGEMENT_WRITE ATPAction::"collect_pre_arrangement_data"
//	atp_record_safety_check        SAFETY_WRITE           ATPAction::"record_safety_check"
//	atp_search_activities          BOOKING_READ           ATPAction::"search_activities"
//	atp_get_booking_status         CONTEXT_READ           ATPAction::"get_booking_status"
//	atp_booking_create|get|transition|events  BOOKING_ADMIN  ATPAdminAction::"booking_…"
//
// Every tool's command subject is cg.<ver>.<project>.<channel>.cmd.tool.
// atp.<tool_name>. docs/catalogues/atp.md lists every tool with an example
// and the state tables.
package atp
