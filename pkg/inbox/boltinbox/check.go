package boltinbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/pkg/inbox"
)

// Check opens the inbox file at path read-only (it must not be open in
// this process) and reports every bbolt consistency error (as `bbolt
// check` does) and every index entry that disagrees with the entries:
// an index naming a missing entry, a pending index naming an entry that is
// not pending, a pending entry missing from the pending index, an entry
// this process remembers decoded otherwise than its bytes decode. Tests
// end with it; an operator may run it on a stopped inbox's file.
func Check(path string) error {
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true, Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("boltinbox: check: open %s: %w", path, err)
	}
	defer b.Close()
	err = b.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		recs := map[string]*record{}
		err := tx.Bucket(bucketEntries).ForEach(func(k, v []byte) error {
			var r record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("entry %q is not JSON: %w", k, err)
			}
			if !bytes.Equal(k, key(r.ProjectID, r.InboxID)) {
				return fmt.Errorf("entry %s of project %s is stored under another key %q", r.InboxID, r.ProjectID, k)
			}
			if err := records.Agrees(k, v, r, func(r record) ([]byte, error) { return json.Marshal(r) }); err != nil {
				return err
			}
			recs[r.ProjectID+"\x00"+r.InboxID] = &r
			return nil
		})
		if err != nil {
			return err
		}
		byID := map[string]*record{}
		for _, r := range recs {
			byID[r.InboxID] = r
		}
		pendingSeen := 0
		for _, name := range [][]byte{bucketCalls, bucketAgents, bucketPending} {
			err := tx.Bucket(name).ForEach(func(k, v []byte) error {
				r, ok := byID[string(v)]
				if !ok {
					return fmt.Errorf("%s index entry %q names missing entry %s", name, k, v)
				}
				if bytes.Equal(name, bucketPending) {
					pendingSeen++
					if r.State != inbox.StatePending {
						return fmt.Errorf("pending index names %s in state %s", v, r.State)
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		pendingTotal := 0
		for _, r := range recs {
			if r.State == inbox.StatePending {
				pendingTotal++
			}
		}
		if pendingTotal != pendingSeen {
			return fmt.Errorf("%d pending entries but %d in the pending index", pendingTotal, pendingSeen)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("boltinbox: check %s: %w", path, err)
	}
	return nil
}
