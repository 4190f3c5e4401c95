package jskv

import "context"

// Next returns the first stored message (a value or a delete marker) at
// or after stream sequence from whose key matches filter (a key or a
// pattern with * and >), read from the stream leader with one request and
// no consumer; found is false when there is none. The key's Entry.Revision
// is the message's sequence: ask again from Revision+1 to walk a key
// pattern in write order, one message per request, as Scan does.
//
// What a request costs the server: from a sequence past the stream's
// first, the messages between from and the match are passed over (from
// the first, the server's subject index finds the match instead, in time
// proportional to the keys matching filter); a walk that reaches the end
// of the stream passes over every message after its last match.
func (b *Bucket) Next(ctx context.Context, filter string, from uint64) (key string, e Entry, found bool, err error) {
	return b.msgGet(ctx, map[string]any{"seq": max(from, 1), "next_by_subj": b.keyPre + filter})
}
