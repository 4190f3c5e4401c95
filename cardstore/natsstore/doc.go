// Package natsstore serves a cardstore.Store over core NATS request-reply and
// provides Client, a cardstore.Store that talks to such a server. Agent
// runtimes and tool workers in other processes reach the CardStore only
// through it.
//
// Requests go to cg.<ver>.<project_id>.<channel_id>.svc.cardstore.<op>; the
// project in the subject scopes the request, so a request on project A's
// subject can neither read nor write project B's cards. docs/protocol.md
// lists every operation with its request and reply bodies.
//
// Caveats:
//   - One Put over NATS holds the cards of one project (the subject's). The
//     local store accepts mixed batches; the client refuses them.
//   - Claim leases travel in whole milliseconds.
//   - Replies are bounded by the cardstore limits (MaxBatch, MaxPage,
//     MaxBoxCards, card size), which keep every reply under the 8 MiB max
//     payload that `utpmesh up` configures; a NATS server with a smaller
//     max_payload may refuse the largest replies, which then fail with
//     cardstore.ErrTooLarge.
package natsstore
