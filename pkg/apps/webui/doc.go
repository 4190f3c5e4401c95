// Package webui serves the operator's web UI over a mesh's NATS services:
// a project's turns (newest first, updated live), a turn as a timeline of
// its tool calls, each call's tool.call and tool.result cards, the turn's
// pending confirmations (package confirm, whichever catalogue parked them)
// with Confirm and Cancel buttons, and a replay of the turn with its diff.
//
// It is plain server-rendered HTML (html/template) with one small vanilla
// script; templates and static files are embedded. Everything it shows
// comes from the CardStore (Store) and pkg/turn: Load rebuilds a turn,
// PlanReplay and Replay re-run it, and the timeline bars are the calls'
// CalledAt (tool.call created_at) to FinishedAt (tool.result created_at).
// Confirm, Cancel and Replay make real tool calls through pkg/agent, as the
// agent of Config.Agent (the operator's mandate travels with them).
//
// # Live updates
//
// Core NATS subscriptions on every command subject of the protocol version
// (cg.<ver>.*.*.cmd.>) and on the inbox's report requests
// (cg.<ver>.*.*.svc.inbox.report) feed Server-Sent Events (GET /events):
// tool commands and inbox reports of the project become a "turn" event
// naming the turn. The page then re-fetches the fragment it shows (the turn
// list, or the turn when it is the one named). Push rather than poll: an
// idle UI costs nothing, a call shows up as soon as it is dispatched, and
// the browser never re-reads a turn that did not change. An event a slow
// browser could not take is not lost silently: the stream sends "resync"
// and the page re-fetches.
//
// # Access control
//
// The mesh has no credentials on NATS today, so the UI protects itself. A
// Server is created with an access token (Config.Token); a browser presents
// it once in the URL (/?token=…), gets it back as an HttpOnly
// SameSite=Strict cookie, and is redirected to the same page without the
// token. Requests without the cookie get 401 and a page saying how to get
// in. Config.Open switches the token check off (the caller logs that it
// did). Every POST (confirm, cancel, replay) must carry the page's CSRF
// token and pass http.CrossOriginProtection (Sec-Fetch-Site / Origin), in
// open mode too.
package webui
