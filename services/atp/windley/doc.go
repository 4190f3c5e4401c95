// Package windley is the agent side of ATP's Windley Loop (seed ATP
// addendum, section 3.4A; decisions MCP-D13 to MCP-D15): an agent asks the
// PMO built-in mandate_query which tools its mandate permits in the
// booking's current state before it plans (QueryMandate, Loop), re-asks on
// a booking state transition, on HEM completion and on a new mandate —
// never on a timer — and turns a call its mandate lacks into a structured
// expansion request routed to an operator through atp_invoke_hem with
// hem_id HEM-MANDATE-01 (MandateGap, EscalateMandateGap).
//
// It builds on the thin agent SDK (pkg/agent); the Cedar partial
// evaluation itself runs in the mesh (pkg/authz.Query).
package windley
