// Package windley is the agent side of ATP's Windley Loop (seed ATP
// addendum, section 3.4A; decisions MCP-D13 to MCP-D15): an agent asks the
// PMO built-in mandate_query which tools its mandate permits in the
// booking's current state before it plans (QueryMandate, Loop), re-asks on
// a booking state transition, on HEM completion and on a new mandate —
// never on a timer — and turns a call its mandate lacks into a structured
// expansion request routed to an operator through atp_invoke_hem with
// hem_id HEM-MANDATE-01 (MandateGap, EscalateMandateGap).
//
// The booking's state transitions reach the loop as state events
// (Loop.Follow, docs/protocol.md §10.4), and Loop.Call refuses, without
// dispatching, a call the current residual set does not permit. An
// approved expansion's narrowed sub-mandate arrives in the turn's
// <call>.hem-result card (ReadResolution); Loop.Resolved re-queries with
// it.
//
// It builds on the thin agent SDK (pkg/agent); the Cedar partial
// evaluation itself runs in the mesh (pkg/authz.Query).
package windley
