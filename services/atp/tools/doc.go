// Package tools is the ATP tool service: the seed's tools and the
// operators' booking tools, on the Booking Objects of package booking.
//
// Every tool registers its JSON Schema, one Cedar action
// (ATPAction::"<name>" as in the seed; ATPAdminAction::"booking_<verb>"
// for the operators' tools) and its scope. A call runs after the gate has
// allowed it; the handler then checks the booking's state against the
// tool's precondition and fails a wrong state with code atp_wrong_state,
// naming the states required and the state found (detail
// {"atp_error_code":"MCP-409-STATE","required_states":[...],"booking_state":"..."}).
// Each effect and its event-log entry are written in one bbolt
// transaction.
package tools
