package jskv

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/utpmesh/utpmesh/internal/deadline"
)

// Drop removes key without a trace: it purges the key's messages from the
// bucket's stream, so no delete marker stays behind (a KV Delete leaves
// one, which every later scan of the key's pattern passes over). A
// watcher sees nothing: use it for keys whose removal nobody watches,
// like index keys. Dropping a missing key is no error.
func (b *Bucket) Drop(ctx context.Context, key string) error {
	return b.purge(ctx, key, 0)
}

// purge purges key's messages from the bucket's stream: all of them
// (upTo 0), or those whose sequence is below upTo, so that a message
// stored since the caller looked is kept.
func (b *Bucket) purge(ctx context.Context, key string, upTo uint64) error {
	body := map[string]any{"filter": b.keyPre + key}
	if upTo > 0 {
		body["seq"] = upTo
	}
	req, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := b.bound(ctx)
	defer cancel()
	msg, err := deadline.Request(ctx, b.nc, b.purgeSubj, req)
	if err != nil {
		return fmt.Errorf("jskv: drop %s: %w", key, err)
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error,omitempty"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("jskv: drop %s: malformed reply: %w", key, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("jskv: drop %s: %s (code %d, err_code %d)", key, resp.Error.Description, resp.Error.Code, resp.Error.ErrCode)
	}
	return nil
}
