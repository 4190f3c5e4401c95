// Package confirm is the mesh's convention for a tool result that waits for
// a human's confirmation (docs/protocol.md §19).
//
// A tool that must not act before a person agrees ends its call with UTP
// status success and a Pending result instead of acting: status
// PENDING_CONFIRM, the confirmation id, the tool that asked, what it would
// do and until when. A second tool call resolves it: the confirm tool runs
// the parked action, the cancel tool drops it; each takes
// {"confirmation_id": "…"} (Args) and answers an Answer. The tool that
// resolves a pending call may record the resolution in the asking call's
// turn as a card whose content carries a Resolution under "transition".
//
// Any catalogue may use the convention; ATLAS does. Clients that render
// confirmations (the MCP bridge's elicitation, the web UI, the CLI) read
// only this package's shapes, never a catalogue's. A Pending names its
// resolver tools in confirm_tool and cancel_tool; when it omits them the
// protocol's defaults DefaultConfirmTool and DefaultCancelTool apply (the
// names of the first catalogue to use the convention, kept so its results
// stay unchanged on the wire).
//
// The package depends on the standard library only.
package confirm
