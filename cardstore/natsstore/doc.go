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
// tool.result cards are written with op put_result, never put (put
// refuses a batch holding one with ErrWrongOp, wire code wrong_op); Client
// picks the op by itself. The split lets NATS permissions keep agent
// identities, which may put their own cards, from writing results
// (internal/meshauth, docs/security.md).
//
// Caveats:
//   - One Put over NATS holds the cards of one project (the subject's). The
//     local store accepts mixed batches; the client refuses them.
//   - Claim leases travel in whole milliseconds.
//   - A reply must fit one NATS message (8 MiB in `utpmesh up`). A
//     list_turn or get_many page of many large cards can exceed it; the
//     request then fails with cardstore.ErrTooLarge and the caller asks for
//     a smaller page (ListTurnRequest.Limit, fewer ids).
package natsstore
