package cardstore

import (
	"context"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// EntryPutter is implemented by a Store whose write of a tool.result card
// can also store the call's inbox entry, in the same commit, and say so:
// a single node's store, whose file the inbox shares
// (cardstore/boltstore with a result hook), and the NATS client of any
// store (cardstore/natsstore, which reads the put_result reply's
// inbox_entry). A worker that is told its result's entry is stored needs
// not report the result to the inbox (docs/protocol.md §8). A Store that
// never stores entries (the replicated cardstore/jsstore) does not
// implement it, and a caller treats it as answering false.
//
// A wrapper that embeds a store by its concrete type (*boltstore.Store,
// *natsstore.Client) and overrides Put inherits PutWithEntry, which
// bypasses that Put for the worker's results: embed the cardstore.Store
// interface instead, or override PutWithEntry too.
type EntryPutter interface {
	// PutWithEntry is Put. inboxEntry is true only when the cards hold
	// tool.result cards and the commit that stored each of them new
	// also stored (or found) its call's inbox entry, durable when
	// PutWithEntry returns; the entry's wakeup may still be on its way.
	// False says nothing of the entry (a repeat of a stored result, a
	// result the inbox makes no entry for, a store without an inbox): the
	// caller reports the result as usual.
	PutWithEntry(ctx context.Context, cards ...*card.Card) (inboxEntry bool, err error)
}
