package jspolicy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/subjects"
)

// DefaultBucket is the KV bucket of the policies.
const DefaultBucket = "utpmesh_policies"

// HistoryLimit is how many versions of each project's policy set are kept
// by default (the current one included), as in policystore.
const HistoryLimit = 20

// MaxPolicyBytes bounds one project's policy text (authz.MaxPolicyBytes).
const MaxPolicyBytes = authz.MaxPolicyBytes

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

// Store is an authz.PolicyHistory on JetStream KV. It is safe for
// concurrent use, also by several processes on the same bucket.
type Store struct {
	b       *jskv.Bucket
	now     func() time.Time
	actions authz.ActionSource
	keep    int
	direct  bool
	closed  atomic.Bool
}

var _ authz.PolicyHistory = (*Store)(nil)

// Open creates the bucket (or updates its configuration) and returns the
// store.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.HistoryLimit == 0 {
		cfg.HistoryLimit = HistoryLimit
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	b, err := jskv.Open(ctx, js, jskv.Config{
		Bucket: cfg.Bucket, Replicas: cfg.Replicas, History: cfg.HistoryLimit,
		Description: "utpmesh policy sets, their history and auth configs (pkg/authz/policystore/jspolicy)",
	})
	if err != nil {
		return nil, fmt.Errorf("jspolicy: %w", err)
	}
	return &Store{b: b, now: cfg.Clock, actions: cfg.Actions, keep: cfg.HistoryLimit, direct: cfg.DirectReads}, nil
}

// Close makes every later call fail with authz.ErrClosed. It does not
// close the NATS connection. It is idempotent.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

func policiesKey(project string) string { return "policies." + project }
func configKey(project string) string   { return "config." + project }

// begin checks the project, the context and whether the store is closed.
func (s *Store) begin(ctx context.Context, project string) error {
	if err := subjects.ValidateToken("project_id", project); err != nil {
		return fmt.Errorf("%w: %v", authz.ErrInvalidRequest, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return authz.ErrClosed
	}
	return nil
}

// read is the read of Policies and Config: from the stream leader, or a
// direct get with Config.DirectReads.
func (s *Store) read(ctx context.Context, key string) (jskv.Entry, error) {
	if !s.direct {
		return s.b.Latest(ctx, key)
	}
	e, err := s.b.KV.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return jskv.Entry{}, nil
	}
	if err != nil {
		return jskv.Entry{}, err
	}
	return jskv.Entry{Value: e.Value(), Revision: e.Revision(), Exists: true}, nil
}

// Policies implements authz.PolicySource.
func (s *Store) Policies(ctx context.Context, project string) (*authz.PolicyDoc, error) {
	if err := s.begin(ctx, project); err != nil {
		return nil, err
	}
	cur, err := s.read(ctx, policiesKey(project))
	if err != nil {
		return nil, wrap("policies of "+project, err)
	}
	if !cur.Exists {
		return nil, fmt.Errorf("%w: project %s has no policy set (utpmesh policy put --project %s FILE)", authz.ErrNotFound, project, project)
	}
	return decodeDoc(project, cur.Value)
}

// PutPolicies implements authz.PolicyStore: it validates text and stores
// it as the project's policy set, whatever version is stored.
func (s *Store) PutPolicies(ctx context.Context, project, text string) (*authz.PolicyDoc, error) {
	return s.write(ctx, project, text, nil, 0)
}

// ReplacePolicies implements authz.PolicyHistory.
func (s *Store) ReplacePolicies(ctx context.Context, project, text string, base uint64) (*authz.PolicyDoc, error) {
	return s.write(ctx, project, text, &base, 0)
}

// Rollback implements authz.PolicyHistory.
func (s *Store) Rollback(ctx context.Context, project string, version, base uint64) (*authz.PolicyDoc, error) {
	old, err := s.PolicyVersion(ctx, project, version)
	if err != nil {
		return nil, err
	}
	return s.write(ctx, project, old.Policies, &base, version)
}

// validate checks text against the schema and, with Actions, the
// project's tools.
func (s *Store) validate(ctx context.Context, project, text string) error {
	return authz.ValidateStored(ctx, s.actions, project, text)
}

// write validates text and stores it as the next version (unless it is
// the stored text), checking base when given and recording rolledBack.
func (s *Store) write(ctx context.Context, project, text string, base *uint64, rolledBack uint64) (*authz.PolicyDoc, error) {
	if err := s.begin(ctx, project); err != nil {
		return nil, err
	}
	if err := s.validate(ctx, project, text); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(text))
	sha := hex.EncodeToString(sum[:])
	key := policiesKey(project)
	var doc *authz.PolicyDoc
	err := jskv.CAS(ctx, "policy put of "+project, func() error {
		cur, err := s.b.Latest(ctx, key)
		if err != nil {
			return err
		}
		var old *authz.PolicyDoc
		if cur.Exists {
			if old, err = decodeDoc(project, cur.Value); err != nil {
				return err
			}
		}
		var v uint64
		if old != nil {
			v = old.Version
		}
		if base != nil && *base != v {
			return fmt.Errorf("%w: %s is at version %d, not %d as when you looked; review it again (utpmesh policy get --project %s)", authz.ErrConflict, project, v, *base, project)
		}
		if old != nil && old.SHA256 == sha {
			doc = old // the stored text: nothing changes
			return nil
		}
		doc = &authz.PolicyDoc{Project: project, Policies: text, Version: v + 1, SHA256: sha,
			UpdatedAt: s.now().UTC(), RolledBackFrom: rolledBack}
		data, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		_, err = s.b.KV.Update(ctx, key, data, cur.Revision)
		return err
	})
	if err != nil {
		return nil, wrap("policy put of "+project, err)
	}
	return doc, nil
}

// revisions returns the kept versions of the project's policy set, oldest
// first (none when it has no policy set).
func (s *Store) revisions(ctx context.Context, project string) ([]*authz.PolicyDoc, error) {
	var out []*authz.PolicyDoc
	err := s.b.Scan(ctx, policiesKey(project), func(_ string, e jskv.Entry) error {
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
	return out, nil
}

// History implements authz.PolicyHistory: the kept versions, newest
// first; a project without a policy set has an empty history.
func (s *Store) History(ctx context.Context, project string) ([]authz.PolicyVersion, error) {
	if err := s.begin(ctx, project); err != nil {
		return nil, err
	}
	docs, err := s.revisions(ctx, project)
	if err != nil {
		return nil, err
	}
	out := []authz.PolicyVersion{}
	for i, d := range slices.Backward(docs) {
		out = append(out, authz.PolicyVersion{Version: d.Version, SHA256: d.SHA256, UpdatedAt: d.UpdatedAt,
			Bytes: len(d.Policies), RolledBackFrom: d.RolledBackFrom, Current: i == len(docs)-1})
	}
	return out, nil
}

// PolicyVersion implements authz.PolicyHistory.
func (s *Store) PolicyVersion(ctx context.Context, project string, version uint64) (*authz.PolicyDoc, error) {
	if err := s.begin(ctx, project); err != nil {
		return nil, err
	}
	if version == 0 {
		return nil, fmt.Errorf("%w: version must be 1 or more (utpmesh policy history --project %s lists them)", authz.ErrInvalidRequest, project)
	}
	docs, err := s.revisions(ctx, project)
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		if d.Version == version {
			return d, nil
		}
	}
	return nil, fmt.Errorf("%w: version %d of %s's policies is not kept (the last %d are; utpmesh policy history --project %s lists them)", authz.ErrNotFound, version, project, s.keep, project)
}

// Config implements authz.PolicySource.
func (s *Store) Config(ctx context.Context, project string) (authz.ProjectConfig, error) {
	c := authz.ProjectConfig{Mandate: authz.MandateRequired}
	if err := s.begin(ctx, project); err != nil {
		return c, err
	}
	cur, err := s.read(ctx, configKey(project))
	if err != nil {
		return c, wrap("config of "+project, err)
	}
	if !cur.Exists {
		return c, nil
	}
	if err := json.Unmarshal(cur.Value, &c); err != nil {
		return c, fmt.Errorf("jspolicy: stored config of %s: %w", project, err)
	}
	if c.Mandate == "" {
		c.Mandate = authz.MandateRequired
	}
	return c, nil
}

// PutConfig implements authz.PolicyStore. The config is replaced whole,
// so it is a plain put (the last writer wins).
func (s *Store) PutConfig(ctx context.Context, project string, c authz.ProjectConfig) error {
	if err := s.begin(ctx, project); err != nil {
		return err
	}
	if err := c.Check(); err != nil {
		return err
	}
	if c.Mandate == "" {
		c.Mandate = authz.MandateRequired
	}
	v, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = s.b.KV.Put(ctx, configKey(project), v)
	return wrap("config put of "+project, err)
}

func decodeDoc(project string, v []byte) (*authz.PolicyDoc, error) {
	d := new(authz.PolicyDoc)
	if err := json.Unmarshal(v, d); err != nil {
		return nil, fmt.Errorf("jspolicy: stored policies of %s: %w", project, err)
	}
	return d, nil
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
