package jskv

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/utpmesh/utpmesh/internal/parallel"

	"github.com/utpmesh/utpmesh/internal/deadline"
)

// ScanParallel is how many leader reads ScanLatest keeps in flight.
const ScanParallel = 32

// Keys returns, sorted, the keys matching filter (a key or a pattern with
// * and >) that have a stored message (a value or a delete marker), as
// the stream leader has them: one $JS.API.STREAM.INFO request with a
// subjects filter per page (the server's page holds up to 100,000 keys),
// no consumer.
func (b *Bucket) Keys(ctx context.Context, filter string) ([]string, error) {
	var keys []string
	for offset := 0; ; {
		req, err := json.Marshal(map[string]any{"subjects_filter": b.keyPre + filter, "offset": offset})
		if err != nil {
			return nil, err
		}
		ctx, cancel := b.bound(ctx)
		msg, err := deadline.Request(ctx, b.nc, b.infoSubj, req)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("jskv: list keys %s from the stream leader: %w", filter, err)
		}
		var resp struct {
			Error *struct {
				Code        int    `json:"code"`
				ErrCode     int    `json:"err_code"`
				Description string `json:"description"`
			} `json:"error,omitempty"`
			Total int `json:"total"`
			State struct {
				Subjects map[string]uint64 `json:"subjects"`
			} `json:"state"`
		}
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			return nil, fmt.Errorf("jskv: list keys %s: malformed reply: %w", filter, err)
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("jskv: list keys %s: %s (code %d, err_code %d)", filter, resp.Error.Description, resp.Error.Code, resp.Error.ErrCode)
		}
		for subj := range resp.State.Subjects {
			keys = append(keys, strings.TrimPrefix(subj, b.keyPre))
		}
		n := len(resp.State.Subjects)
		offset += n
		if n == 0 || offset >= resp.Total {
			break
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// ScanLatest calls fn, in key order, with the latest revision of every
// key matching filter (delete markers included, as Entry.Exists false),
// read from the stream leader: the keys with Keys, then each key's
// latest message with up to ScanParallel reads in flight. It costs about
// what Scan costs divided by ScanParallel. A key written during the scan
// is seen at its old or its new revision; one created during it may be
// missed.
func (b *Bucket) ScanLatest(ctx context.Context, filter string, fn func(key string, e Entry) error) error {
	keys, err := b.Keys(ctx, filter)
	if err != nil {
		return err
	}
	entries := make([]Entry, len(keys))
	err = parallel.Each(len(keys), ScanParallel, func(i int) (err error) {
		entries[i], err = b.Latest(ctx, keys[i])
		return err
	})
	if err != nil {
		return err
	}
	for i, k := range keys {
		if err := fn(k, entries[i]); err != nil {
			return err
		}
	}
	return nil
}

// bound bounds one request to the bucket (Config.Timeout, Bind).
func (b *Bucket) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.within {
		return deadline.Within(ctx, b.timeout)
	}
	return deadline.Bound(ctx, b.timeout)
}
