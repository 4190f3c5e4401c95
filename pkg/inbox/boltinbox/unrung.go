package boltinbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/pkg/inbox"
)

// Unrung lists pending entries whose wakeup is not marked sent
// (wakeup_sent_at unset), and, when markedSince is not zero, those marked
// at or after it, across every project: the entries a crash may have left
// without a stored wakeup, which the inbox service rings when it starts
// (inboxsvc: "Wakeups are doorbells"). The marked ones are for a wakeup
// stream that acknowledges before its fsync (streams.WithAsyncPersist),
// whose last wakeups a crash can lose after their marks were committed.
// It reads at most scan keys
// of the pending index, in its order (project, agent, creation), starting
// after the cursor after ("" from the first), in one read transaction,
// and returns the unmarked entries among them and the cursor of the next
// page, "" once the index is read to its end. An entry acked by a lazy ack
// not yet committed is not pending. scan must be positive.
func (d *DB) Unrung(ctx context.Context, after string, scan int, markedSince time.Time) ([]inbox.Entry, string, error) {
	if scan <= 0 {
		return nil, "", fmt.Errorf("%w: boltinbox.Unrung: scan is %d, want at least 1 key per page", inbox.ErrInvalid, scan)
	}
	var (
		out  []inbox.Entry
		next string
	)
	err := d.view(ctx, func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketPending).Cursor()
		k, v := c.First()
		if after != "" {
			k, v = c.Seek([]byte(after))
			if k != nil && bytes.Equal(k, []byte(after)) {
				k, v = c.Next()
			}
		}
		var last []byte
		for n := 0; k != nil; k, v = c.Next() {
			if n == scan {
				next = string(last) // more to read: resume after the last key read
				return nil
			}
			n, last = n+1, k
			project, ok := keyProject(k)
			if !ok {
				return fmt.Errorf("inbox: pending index key %x has no project", k)
			}
			r, err := getRecord(tx, project, string(v))
			if err != nil {
				return err
			}
			if r == nil {
				return fmt.Errorf("inbox: pending index names entry %s of project %s, which does not exist", v, project)
			}
			d.overlay(project, &r.Entry)
			if r.State == inbox.StatePending && (r.WakeupSentAt == nil || (!markedSince.IsZero() && !r.WakeupSentAt.Before(markedSince))) {
				out = append(out, r.Entry)
			}
		}
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("inbox: list entries without a wakeup-sent mark: %w", err)
	}
	return out, next, nil
}

// keyProject reads the project, the first component of an index key.
func keyProject(k []byte) (string, bool) {
	n, w := binary.Uvarint(k)
	if w <= 0 || uint64(len(k)-w) < n {
		return "", false
	}
	return string(k[w : w+int(n)]), true
}
