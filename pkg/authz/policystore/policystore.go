package policystore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/subjects"
)

// MaxPolicyBytes bounds one project's policy text (authz.MaxPolicyBytes).
const MaxPolicyBytes = authz.MaxPolicyBytes

// DecodeDoc decodes a stored policy document of project, as a backend
// reads it; the error names the backend (say "boltpolicy") and project.
func DecodeDoc(backend, project string, v []byte) (*authz.PolicyDoc, error) {
	d := new(authz.PolicyDoc)
	if err := json.Unmarshal(v, d); err != nil {
		return nil, fmt.Errorf("%s: stored policies of %s: %w", backend, project, err)
	}
	return d, nil
}

// HistoryLimit is how many versions of each project's policy set a store
// keeps by default (the current one included).
const HistoryLimit = 20

// Store is the contract of a policy store: the policy history the authz
// service serves and its gate reads (put, replace, rollback, history),
// and Close. boltpolicy and jspolicy implement it (both through
// Versioned), and natspolicy's Client over NATS; all three pass
// policystoretest.
type Store interface {
	authz.PolicyHistory
	// Close releases the store; later calls fail with authz.ErrClosed.
	// It is idempotent.
	Close() error
}

// Backend is the storage under a Versioned: it keeps documents and
// configs and knows nothing of validation, versions or conflicts.
// Versioned has checked the project id and the context before any call.
// A backend returns authz.ErrClosed (wrapped) once its storage is gone.
type Backend interface {
	// Current returns the project's current document, nil when it has
	// none. It is the gate's read on every call.
	Current(ctx context.Context, project string) (*authz.PolicyDoc, error)
	// Update runs next on the project's current document (nil: none) and
	// stores what it returns as the new current document, recording it in
	// the project's history, atomically: no other write lands between
	// the read and the write (a backend may run next again after a
	// concurrent write). next returning nil stores nothing; an error of
	// next is returned as is.
	Update(ctx context.Context, project string, next func(cur *authz.PolicyDoc) (*authz.PolicyDoc, error)) error
	// Versions returns the project's kept documents, newest first (the
	// current one first); none when it has no policy set.
	Versions(ctx context.Context, project string) ([]*authz.PolicyDoc, error)
	// Config returns the project's stored config; found is false when it
	// has none.
	Config(ctx context.Context, project string) (c authz.ProjectConfig, found bool, err error)
	// PutConfig replaces the project's config (the last writer wins).
	PutConfig(ctx context.Context, project string, c authz.ProjectConfig) error
	// Close releases the storage.
	Close() error
}

// Config configures New.
type Config struct {
	// Actions, when set, validates every put and rollback against the
	// actions it lists for the project (authz.ValidateFor); without it any
	// action named in a policy's scope is accepted.
	Actions authz.ActionSource
	// HistoryLimit is how many versions the backend keeps of each project
	// (it only names it in errors; the backend drops older ones); 0 means
	// HistoryLimit.
	HistoryLimit int
	// Clock stamps UpdatedAt; default time.Now.
	Clock func() time.Time
}

// Versioned is a Store over a Backend: it holds the rules every policy
// store shares. A put validates the text (syntax, schema, and with
// Config.Actions the project's tools) before anything is written. Each put
// of a new text stores the next version; a put of the stored text changes
// nothing. ReplacePolicies and Rollback refuse with authz.ErrConflict
// unless the stored version is their base. Rollback stores an old text as
// a new version (RolledBackFrom set). A project never configured has
// mandate "required". After Close every call fails with authz.ErrClosed.
type Versioned struct {
	b       Backend
	actions authz.ActionSource
	keep    int
	now     func() time.Time
	closed  atomic.Bool
}

var _ Store = (*Versioned)(nil)

// New returns the Store over b.
func New(b Backend, cfg Config) *Versioned {
	if cfg.HistoryLimit == 0 {
		cfg.HistoryLimit = HistoryLimit
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Versioned{b: b, actions: cfg.Actions, keep: cfg.HistoryLimit, now: cfg.Clock}
}

// CheckProject refuses a project id that is not a subject token, with an
// error wrapping authz.ErrInvalidRequest.
func CheckProject(project string) error {
	if err := subjects.ValidateToken("project_id", project); err != nil {
		return fmt.Errorf("%w: %v", authz.ErrInvalidRequest, err)
	}
	return nil
}

// begin checks the project, the context and whether the store is closed.
func (s *Versioned) begin(ctx context.Context, project string) error {
	if err := CheckProject(project); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return authz.ErrClosed
	}
	return nil
}

// Close closes the backend; later calls fail with authz.ErrClosed. It is
// idempotent.
func (s *Versioned) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.b.Close()
}

// Policies implements authz.PolicySource.
func (s *Versioned) Policies(ctx context.Context, project string) (*authz.PolicyDoc, error) {
	if err := s.begin(ctx, project); err != nil {
		return nil, err
	}
	doc, err := s.b.Current(ctx, project)
	if err != nil {
		return nil, err
	}
	if doc == nil {
		return nil, fmt.Errorf("%w: project %s has no policy set (utpmesh policy put --project %s FILE)", authz.ErrNotFound, project, project)
	}
	return doc, nil
}

// PutPolicies implements authz.PolicyStore: it validates text and stores
// it as the project's policy set, whatever version is stored.
func (s *Versioned) PutPolicies(ctx context.Context, project, text string) (*authz.PolicyDoc, error) {
	return s.write(ctx, project, text, nil, 0)
}

// ReplacePolicies implements authz.PolicyHistory.
func (s *Versioned) ReplacePolicies(ctx context.Context, project, text string, base uint64) (*authz.PolicyDoc, error) {
	return s.write(ctx, project, text, &base, 0)
}

// Rollback implements authz.PolicyHistory.
func (s *Versioned) Rollback(ctx context.Context, project string, version, base uint64) (*authz.PolicyDoc, error) {
	old, err := s.PolicyVersion(ctx, project, version)
	if err != nil {
		return nil, err
	}
	return s.write(ctx, project, old.Policies, &base, version)
}

// write validates text and stores it as the next version (unless it is
// the stored text), checking base when given and recording rolledBack.
func (s *Versioned) write(ctx context.Context, project, text string, base *uint64, rolledBack uint64) (*authz.PolicyDoc, error) {
	if err := s.begin(ctx, project); err != nil {
		return nil, err
	}
	if err := authz.ValidateStored(ctx, s.actions, project, text); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(text))
	sha := hex.EncodeToString(sum[:])
	var doc *authz.PolicyDoc
	err := s.b.Update(ctx, project, func(old *authz.PolicyDoc) (*authz.PolicyDoc, error) {
		var cur uint64
		if old != nil {
			cur = old.Version
		}
		if base != nil && *base != cur {
			return nil, fmt.Errorf("%w: %s is at version %d, not %d as when you looked; review it again (utpmesh policy get --project %s)", authz.ErrConflict, project, cur, *base, project)
		}
		if old != nil && old.SHA256 == sha {
			doc = old // the stored text: nothing changes
			return nil, nil
		}
		doc = &authz.PolicyDoc{Project: project, Policies: text, Version: cur + 1, SHA256: sha,
			UpdatedAt: s.now().UTC(), RolledBackFrom: rolledBack}
		return doc, nil
	})
	if err != nil {
		return nil, err
	}
	return doc, nil
}

// History implements authz.PolicyHistory: the kept versions, newest
// first; a project without a policy set has an empty history.
func (s *Versioned) History(ctx context.Context, project string) ([]authz.PolicyVersion, error) {
	if err := s.begin(ctx, project); err != nil {
		return nil, err
	}
	docs, err := s.b.Versions(ctx, project)
	if err != nil {
		return nil, err
	}
	out := make([]authz.PolicyVersion, 0, len(docs))
	for i, d := range docs {
		out = append(out, authz.PolicyVersion{Version: d.Version, SHA256: d.SHA256, UpdatedAt: d.UpdatedAt,
			Bytes: len(d.Policies), RolledBackFrom: d.RolledBackFrom, Current: i == 0})
	}
	return out, nil
}

// PolicyVersion implements authz.PolicyHistory.
func (s *Versioned) PolicyVersion(ctx context.Context, project string, version uint64) (*authz.PolicyDoc, error) {
	if err := s.begin(ctx, project); err != nil {
		return nil, err
	}
	if version == 0 {
		return nil, fmt.Errorf("%w: version must be 1 or more (utpmesh policy history --project %s lists them)", authz.ErrInvalidRequest, project)
	}
	docs, err := s.b.Versions(ctx, project)
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

// Config implements authz.PolicySource: a project never configured gets
// mandate "required".
func (s *Versioned) Config(ctx context.Context, project string) (authz.ProjectConfig, error) {
	def := authz.ProjectConfig{Mandate: authz.MandateRequired}
	if err := s.begin(ctx, project); err != nil {
		return def, err
	}
	c, found, err := s.b.Config(ctx, project)
	if err != nil || !found {
		return def, err
	}
	if c.Mandate == "" {
		c.Mandate = authz.MandateRequired
	}
	return c, nil
}

// PutConfig implements authz.PolicyStore. The config is replaced whole
// (the last writer wins).
func (s *Versioned) PutConfig(ctx context.Context, project string, c authz.ProjectConfig) error {
	if err := s.begin(ctx, project); err != nil {
		return err
	}
	if err := c.Check(); err != nil {
		return err
	}
	if c.Mandate == "" {
		c.Mandate = authz.MandateRequired
	}
	return s.b.PutConfig(ctx, project, c)
}
