// Package metrics exposes a utpmesh process's Prometheus metrics: the
// collectors (one per-process *prometheus.Registry, never the global one),
// adapters that plug them into the worker runtime, the inbox and the
// CardStore through those packages' own observer interfaces, and an HTTP
// server for /metrics, /healthz (liveness) and /readyz (readiness).
//
// The instrumented packages do not import Prometheus: pkg/worker defines
// worker.Observer, pkg/inbox/inboxsvc inboxsvc.Observer and cardstore/boltstore
// boltstore.CommitObserver, and Metrics.Worker, Metrics.Inbox and
// Metrics.CardStore return implementations of them. A process without
// metrics passes nil observers and pays nothing.
//
// # Metrics
//
// Every name starts with utpmesh_. Labels are bounded: tool (the tools this
// process serves; "_unknown" for a dead-lettered command naming no served
// tool), status (the five result statuses), code (the UTP error codes; a
// tool service's own codes are kept up to MaxCodes distinct values, then
// counted as "other"), outcome (five values). Call ids never become labels.
//
//	utpmesh_build_info{version}                         gauge, 1
//	utpmesh_worker_calls_total{tool,status,code}        results written (code "" for success/partial)
//	utpmesh_worker_call_duration_seconds{tool,status}   delivery arrival → result card written
//	utpmesh_worker_execute_duration_seconds{tool}       the handler alone
//	utpmesh_worker_in_flight{tool}                      handlers running now
//	utpmesh_worker_redeliveries_total{tool}             deliveries after the first
//	utpmesh_worker_claim_takeovers_total{tool}          calls taken over from a dead or stalled worker
//	utpmesh_worker_dead_letters_total{tool}             commands dead-lettered
//	utpmesh_worker_poisoned_total{tool}                 calls failed at the poison limit
//	utpmesh_inbox_reports_total{outcome}                accepted|duplicate|stale|refused|retried
//	utpmesh_inbox_wakeups_total                         wakeups published
//	utpmesh_inbox_wakeup_lag_seconds                    result card created_at → wakeup published
//	utpmesh_inbox_pending_entries                       entries not yet acknowledged (read at scrape)
//	utpmesh_ready                                       1 when /readyz answers 200, else 0 (read at scrape)
//	utpmesh_cardstore_commit_duration_seconds           one bbolt transaction incl. fsync
//	utpmesh_cardstore_commit_group_size                 write requests per transaction
//
// plus the standard go_* and process_* collectors.
//
// # Caveats
//
//   - Counters start at zero with the process; use rate()/increase().
//   - utpmesh_inbox_wakeup_lag_seconds compares the worker's clock (the
//     card's created_at) with the inbox's: across machines it includes
//     their clock skew.
//   - The server has no authentication: bind it to loopback or a private
//     network (the default of `utpmesh up` is 127.0.0.1:9464).
package metrics
