package jsreg

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/pkg/registry"
)

// DefaultBucket is the KV bucket of the registry.
const DefaultBucket = "utpmesh_registry"

// Config configures Open.
type Config struct {
	// Bucket is the KV bucket; default DefaultBucket.
	Bucket string
	// Replicas is the bucket's replica count: 3 in a cluster, 1 (the
	// default, for 0) on a single server.
	Replicas int
	// Clock stamps UpdatedAt; default time.Now.
	Clock func() time.Time
}

// Store is a registry.Registry on JetStream KV. It is safe for concurrent
// use, also by several processes on the same bucket.
type Store struct {
	b      *jskv.Bucket
	clock  func() time.Time
	closed atomic.Bool
}

var _ registry.Registry = (*Store)(nil)

// Open creates the bucket (or updates its configuration) and returns the
// store.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	b, err := jskv.Open(ctx, js, jskv.Config{
		Bucket: cfg.Bucket, Replicas: cfg.Replicas, History: 1,
		Description: "utpmesh tool registry (resource.tools; pkg/registry/jsreg)",
	})
	if err != nil {
		return nil, fmt.Errorf("jsreg: %w", err)
	}
	return &Store{b: b, clock: cfg.Clock}, nil
}

// Close makes every later call fail with registry.ErrClosed. It does not
// close the NATS connection. It is idempotent.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// key is project + "." + tool with dots written "=": a valid KV key
// (tool names may hold "..", never "=") whose first token is the project.
func key(projectID, toolName string) string {
	return projectID + "." + strings.ReplaceAll(toolName, ".", "=")
}

func (s *Store) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return registry.ErrClosed
	}
	return nil
}

// Put implements registry.Registry.
func (s *Store) Put(ctx context.Context, e *registry.Entry) (*registry.Entry, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if err := registry.Validate(e); err != nil {
		return nil, err
	}
	c := e.Clone()
	k := key(c.ProjectID, c.ToolName)
	var out *registry.Entry
	err := jskv.CAS(ctx, "put "+c.ProjectID+"/"+c.ToolName, func() error {
		cur, err := s.b.Latest(ctx, k)
		if err != nil {
			return err
		}
		c.UpdatedAt = s.clock().UTC()
		if cur.Exists {
			// Never go back in time for one key, whatever this node's clock says.
			if old, err := decode(cur.Value); err == nil && c.UpdatedAt.Before(old.UpdatedAt) {
				c.UpdatedAt = old.UpdatedAt
			}
		}
		data, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("encode %s/%s: %w", c.ProjectID, c.ToolName, err)
		}
		// Round-trip so the returned entry is exactly what Get will return.
		if out, err = decode(data); err != nil {
			return err
		}
		_, err = s.b.KV.Update(ctx, k, data, cur.Revision)
		if errors.Is(err, nats.ErrMaxPayload) {
			return fmt.Errorf("entry %s/%s is %d bytes of JSON, more than the NATS server's max_payload (shorten description or parameters): %w", c.ProjectID, c.ToolName, len(data), err)
		}
		return err
	})
	if err != nil {
		return nil, wrap("put", err)
	}
	return out, nil
}

// Get implements registry.Registry.
func (s *Store) Get(ctx context.Context, projectID, toolName string) (*registry.Entry, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if err := registry.CheckKey(projectID, toolName); err != nil {
		return nil, err
	}
	cur, err := s.b.Latest(ctx, key(projectID, toolName))
	if err != nil {
		return nil, wrap("get", err)
	}
	if !cur.Exists {
		return nil, registry.NotFound(projectID, toolName)
	}
	return decode(cur.Value)
}

// List implements registry.Registry.
func (s *Store) List(ctx context.Context, projectID string) ([]*registry.Entry, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if err := registry.CheckProjectID(projectID); err != nil {
		return nil, err
	}
	byKey := map[string]*registry.Entry{}
	err := s.b.Scan(ctx, projectID+".>", func(k string, cur jskv.Entry) error {
		if !cur.Exists { // deleted (History 1 keeps only the marker)
			delete(byKey, k)
			return nil
		}
		e, err := decode(cur.Value)
		if err != nil {
			return err
		}
		byKey[k] = e // a key written during the scan comes again, newer
		return nil
	})
	if err != nil {
		return nil, wrap("list", err)
	}
	out := make([]*registry.Entry, 0, len(byKey))
	for _, e := range byKey {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *registry.Entry) int { return cmp.Compare(a.ToolName, b.ToolName) })
	return out, nil
}

// Delete implements registry.Registry.
func (s *Store) Delete(ctx context.Context, projectID, toolName string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := registry.CheckKey(projectID, toolName); err != nil {
		return err
	}
	k := key(projectID, toolName)
	err := jskv.CAS(ctx, "delete "+projectID+"/"+toolName, func() error {
		cur, err := s.b.Latest(ctx, k)
		if err != nil {
			return err
		}
		if !cur.Exists {
			return registry.NotFound(projectID, toolName)
		}
		return s.b.KV.Delete(ctx, k, jetstream.LastRevision(cur.Revision))
	})
	return wrap("delete", err)
}

func decode(v []byte) (*registry.Entry, error) {
	var e registry.Entry
	if err := json.Unmarshal(v, &e); err != nil {
		return nil, fmt.Errorf("jsreg: corrupt entry: %w", err)
	}
	return &e, nil
}

// wrap passes registry sentinels and context errors through, maps a closed
// NATS connection to registry.ErrClosed and prefixes the rest.
func wrap(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, registry.ErrNotFound), errors.Is(err, registry.ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case jskv.Closed(err):
		return fmt.Errorf("%w: %w", registry.ErrClosed, err)
	}
	return fmt.Errorf("jsreg: %s: %w", op, err)
}
