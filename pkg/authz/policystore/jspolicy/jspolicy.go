package jspolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/authz/policystore"
)

// DefaultBucket is the KV bucket of the policies.
const DefaultBucket = "utpmesh_policies"

// HistoryLimit is how many versions of each project's policy set are kept
// by default (the current one included): policystore.HistoryLimit.
const HistoryLimit = policystore.HistoryLimit

// Config configures Open.
type Config struct {
	// Bucket is the KV bucket; default DefaultBucket.
	Bucket string
	// Replicas is the bucket's replica count: 3 in a cluster, 1 (the
	// default, for 0) on a single server.
	Replicas int
	// HistoryLimit is how many versions of each project are kept, 1..64;
	// 0 means HistoryLimit.
	HistoryLimit int
	// Actions, when set, validates every put and rollback against the
	// actions it lists for the project (authz.ValidateFor); without it any
	// action named in a policy's scope is accepted.
	Actions authz.ActionSource
	// Clock stamps UpdatedAt; default time.Now.
	Clock func() time.Time
	// DirectReads makes Policies and Config (the gate's reads on every
	// call) JetStream direct gets, which the nearest replica answers,
	// instead of reads from the stream leader: cheaper, but in a cluster
	// they can miss a write made through another node for as long as
	// that replica lags. Writes always decide on leader reads.
	DirectReads bool
}

// Store is a policystore.Store on JetStream KV. It is safe for concurrent
// use, also by several processes on the same bucket.
type Store struct {
	*policystore.Versioned
}

var _ policystore.Store = (*Store)(nil)

// Open creates the bucket (or updates its configuration) and returns the
// store.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.HistoryLimit == 0 {
		cfg.HistoryLimit = HistoryLimit
	}
	b, err := jskv.Open(ctx, js, jskv.Config{
		Bucket: cfg.Bucket, Replicas: cfg.Replicas, History: cfg.HistoryLimit,
		Description: "utpmesh policy sets, their history and auth configs (pkg/authz/policystore/jspolicy)",
	})
	if err != nil {
		return nil, fmt.Errorf("jspolicy: %w", err)
	}
	return &Store{policystore.New(&bucket{b: b, direct: cfg.DirectReads},
		policystore.Config{Actions: cfg.Actions, HistoryLimit: cfg.HistoryLimit, Clock: cfg.Clock})}, nil
}

// bucket is the policystore.Backend of a KV bucket.
type bucket struct {
	b      *jskv.Bucket
	direct bool
}

var _ policystore.Backend = (*bucket)(nil)

// Close does not close the NATS connection.
func (k *bucket) Close() error { return nil }

func policiesKey(project string) string { return "policies." + project }
func configKey(project string) string   { return "config." + project }

// read is the read of Policies and Config: from the stream leader, or a
// direct get with Config.DirectReads.
func (k *bucket) read(ctx context.Context, key string) (jskv.Entry, error) {
	if !k.direct {
		return k.b.Latest(ctx, key)
	}
	e, err := k.b.KV.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return jskv.Entry{}, nil
	}
	if err != nil {
		return jskv.Entry{}, err
	}
	return jskv.Entry{Value: e.Value(), Revision: e.Revision(), Exists: true}, nil
}

// Current implements policystore.Backend.
func (k *bucket) Current(ctx context.Context, project string) (*authz.PolicyDoc, error) {
	cur, err := k.read(ctx, policiesKey(project))
	if err != nil {
		return nil, wrap("policies of "+project, err)
	}
	if !cur.Exists {
		return nil, nil
	}
	return decodeDoc(project, cur.Value)
}

// Update implements policystore.Backend: a compare-and-set loop on the
// key's revision read from the stream leader.
func (k *bucket) Update(ctx context.Context, project string, next func(*authz.PolicyDoc) (*authz.PolicyDoc, error)) error {
	key := policiesKey(project)
	err := jskv.CAS(ctx, "policy put of "+project, func() error {
		cur, err := k.b.Latest(ctx, key)
		if err != nil {
			return err
		}
		var old *authz.PolicyDoc
		if cur.Exists {
			if old, err = decodeDoc(project, cur.Value); err != nil {
				return err
			}
		}
		doc, err := next(old)
		if err != nil || doc == nil {
			return err
		}
		data, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		_, err = k.b.KV.Update(ctx, key, data, cur.Revision)
		return err
	})
	return wrap("policy put of "+project, err)
}

// Versions implements policystore.Backend: the key's kept revisions, read
// from the stream leader.
func (k *bucket) Versions(ctx context.Context, project string) ([]*authz.PolicyDoc, error) {
	var out []*authz.PolicyDoc
	err := k.b.Scan(ctx, policiesKey(project), func(_ string, e jskv.Entry) error {
		if !e.Exists {
			return nil
		}
		d, err := decodeDoc(project, e.Value)
		if err != nil {
			return err
		}
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, wrap("history of "+project, err)
	}
	slices.Reverse(out)
	return out, nil
}

// Config implements policystore.Backend.
func (k *bucket) Config(ctx context.Context, project string) (authz.ProjectConfig, bool, error) {
	var c authz.ProjectConfig
	cur, err := k.read(ctx, configKey(project))
	if err != nil {
		return c, false, wrap("config of "+project, err)
	}
	if !cur.Exists {
		return c, false, nil
	}
	if err := json.Unmarshal(cur.Value, &c); err != nil {
		return c, false, fmt.Errorf("jspolicy: stored config of %s: %w", project, err)
	}
	return c, true, nil
}

// PutConfig implements policystore.Backend: a plain put.
func (k *bucket) PutConfig(ctx context.Context, project string, c authz.ProjectConfig) error {
	v, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = k.b.KV.Put(ctx, configKey(project), v)
	return wrap("config put of "+project, err)
}

// decodeDoc decodes a stored document (policystore.DecodeDoc).
func decodeDoc(project string, v []byte) (*authz.PolicyDoc, error) {
	return policystore.DecodeDoc("jspolicy", project, v)
}

// wrap passes authz sentinels and context errors through, maps a closed
// NATS connection to authz.ErrClosed and prefixes the rest.
func wrap(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, authz.ErrConflict), errors.Is(err, authz.ErrNotFound), errors.Is(err, authz.ErrClosed),
		errors.Is(err, authz.ErrInvalidPolicy), errors.Is(err, authz.ErrInvalidRequest),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case jskv.Closed(err):
		return fmt.Errorf("%w: %w", authz.ErrClosed, err)
	}
	return fmt.Errorf("jspolicy: %s: %w", what, err)
}
