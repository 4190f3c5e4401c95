package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
)

// Inbox is what the sweeper needs of the inbox: inboxsvc.Service in
// process, natsinbox.Client over NATS (the delete_turn operation, mesh
// core and admins only).
type Inbox interface {
	List(ctx context.Context, project string, q inbox.ListQuery) ([]inbox.Entry, error)
	DeleteTurn(ctx context.Context, project, agentTurnID string) (int, error)
}

// PolicySource gives a project's policy; found is false when the project
// has none (every turn is kept).
type PolicySource interface {
	Policy(ctx context.Context, project string) (p Policy, found bool, err error)
}

// Config configures a Sweeper.
type Config struct {
	// Store and Inbox are the mesh's. Required.
	Store cardstore.Store
	Inbox Inbox
	// Archive keeps each turn before it is deleted. Required: a sweep
	// never deletes what it has not archived.
	Archive Archiver
	// Policies gives each project's policy (the mesh: the projects'
	// configurations in the policy store). Required by Start.
	Policies PolicySource
	// Projects are swept by Start, one after the other.
	Projects []string
	// Interval between Start's sweeps (default DefaultInterval).
	Interval time.Duration
	// Clock judges ages (default time.Now).
	Clock func() time.Time
	// Holder names this sweeper in the claim on "retention/<project>"
	// (default "retention-" + a new id).
	Holder string
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// DefaultInterval is how often Start sweeps.
const DefaultInterval = 10 * time.Minute

// Report says what one sweep of a project did (or, dry, would do).
type Report struct {
	Project string `json:"project_id"`
	Policy  Policy `json:"policy"`
	DryRun  bool   `json:"dry_run,omitempty"`
	// Turns is how many turns the project had; Over how many were past
	// the policy's limits.
	Turns int `json:"turns"`
	Over  int `json:"over"`
	// Deleted are the turns archived and deleted (dry: that would be),
	// oldest first; Cards, Entries and Bytes count what went with them.
	Deleted []string `json:"deleted"`
	Cards   int      `json:"cards"`
	Entries int      `json:"entries"`
	Bytes   int64    `json:"bytes"`
	// Kept are the turns past the limits that were kept, with why.
	Kept []Kept `json:"kept,omitempty"`
	// Skipped is true when another sweeper held the project's claim.
	Skipped bool `json:"skipped,omitempty"`
}

// Kept is a turn past the limits that a sweep kept.
type Kept struct {
	AgentTurnID string `json:"agent_turn_id"`
	Reason      string `json:"reason"`
}

// Sweeper applies the projects' policies. Create it with New; Sweep
// runs one sweep, Start sweeps every Interval until Stop.
type Sweeper struct {
	cfg  Config
	log  *slog.Logger
	stop chan struct{}
	done chan struct{}
	once sync.Once
	// running is set by Start: Stop then waits for its loop.
	running atomic.Bool
	// cancel ends the context of Start's sweeps (set by Start).
	cancel context.CancelFunc
}

// New checks cfg and returns a Sweeper.
func New(cfg Config) (*Sweeper, error) {
	if cfg.Store == nil || cfg.Inbox == nil || cfg.Archive == nil {
		return nil, fmt.Errorf("%w: retention.Config needs Store, Inbox and Archive", ErrInvalid)
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("%w: Interval %v is negative", ErrInvalid, cfg.Interval)
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Holder == "" {
		cfg.Holder = "retention-" + card.NewID()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Sweeper{cfg: cfg, log: cfg.Logger, stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// sweepLease is the lease of a sweep's claim, renewed every 100 turns.
const sweepLease = 10 * time.Minute

// ClaimKey is the CardStore claim a project's sweep holds.
func ClaimKey(project string) string { return "retention/" + project }

// Start sweeps every project now and then every Interval, in a goroutine
// of its own, until Stop.
func (s *Sweeper) Start() {
	if !s.running.CompareAndSwap(false, true) {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		defer close(s.done)
		defer cancel()
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
			s.SweepAll(ctx)
			t.Reset(s.cfg.Interval)
		}
	}()
}

// Stop ends Start's loop: a sweep in progress stops between two turns,
// and a request it is waiting on is canceled (a turn cut short after its
// archive write is archived again by the next sweep). It returns once the
// loop has ended.
func (s *Sweeper) Stop() {
	s.once.Do(func() {
		close(s.stop)
		if s.cancel != nil {
			s.cancel()
		}
	})
	if s.running.Load() {
		<-s.done
	}
}

// SweepAll sweeps each of Config.Projects under its policy and returns
// the reports; a project that fails is logged and the others are swept.
func (s *Sweeper) SweepAll(ctx context.Context) []*Report {
	var out []*Report
	for _, p := range s.cfg.Projects {
		if s.stopped() {
			break
		}
		if s.cfg.Policies == nil {
			break
		}
		pol, found, err := s.cfg.Policies.Policy(ctx, p)
		if err != nil {
			s.log.Warn("retention: policy not readable; project not swept", "project_id", p, "err", err)
			continue
		}
		if !found || pol.Zero() {
			continue
		}
		r, err := s.Sweep(ctx, p, pol, false)
		if err != nil {
			s.log.Warn("retention: sweep failed", "project_id", p, "err", err)
			continue
		}
		out = append(out, r)
	}
	return out
}

func (s *Sweeper) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// Sweep applies pol to the project once: every turn past its limits is
// archived and deleted, except those it must keep (see the package
// documentation). dryRun reads and reports only. Sweep holds the
// project's claim (ClaimKey) while it runs; when another sweeper holds
// it, the report says Skipped.
func (s *Sweeper) Sweep(ctx context.Context, project string, pol Policy, dryRun bool) (*Report, error) {
	if err := pol.Check(); err != nil {
		return nil, err
	}
	r := &Report{Project: project, Policy: pol, DryRun: dryRun, Deleted: []string{}}
	if !dryRun {
		_, err := s.cfg.Store.Claim(ctx, cardstore.ClaimRequest{ProjectID: project, Key: ClaimKey(project), Holder: s.cfg.Holder, Lease: sweepLease})
		if errors.Is(err, cardstore.ErrClaimHeld) {
			r.Skipped = true
			return r, nil
		}
		if err != nil {
			return nil, fmt.Errorf("retention: claim %s: %w", ClaimKey(project), err)
		}
		defer func() {
			if err := s.cfg.Store.Release(context.WithoutCancel(ctx), project, ClaimKey(project), s.cfg.Holder); err != nil {
				s.log.Warn("retention: release the sweep's claim", "project_id", project, "err", err)
			}
		}()
	}
	over, total, err := s.overLimits(ctx, project, pol)
	if err != nil {
		return nil, err
	}
	r.Turns, r.Over = total, len(over)
	for i, ti := range over {
		if s.stopped() || ctx.Err() != nil {
			break
		}
		if !dryRun && i > 0 && i%100 == 0 {
			// Renew the claim: a long sweep outlives one lease.
			if _, err := s.cfg.Store.Claim(ctx, cardstore.ClaimRequest{ProjectID: project, Key: ClaimKey(project), Holder: s.cfg.Holder, Lease: sweepLease}); err != nil {
				return r, fmt.Errorf("retention: renew claim %s: %w", ClaimKey(project), err)
			}
		}
		reason, err := s.removeTurn(ctx, project, ti, dryRun, r)
		if err != nil {
			return r, err
		}
		if reason != "" {
			r.Kept = append(r.Kept, Kept{AgentTurnID: ti.AgentTurnID, Reason: reason})
			s.log.Info("retention: turn past the limits kept", "project_id", project, "agent_turn_id", ti.AgentTurnID, "reason", reason)
		}
	}
	if !dryRun && (len(r.Deleted) > 0 || len(r.Kept) > 0) {
		s.log.Info("retention: project swept", "project_id", project, "policy", pol.String(), "turns", r.Turns,
			"deleted", len(r.Deleted), "cards", r.Cards, "inbox_entries", r.Entries, "bytes", r.Bytes, "kept", len(r.Kept))
	}
	return r, nil
}

// overLimits lists the project's turns past pol's limits, oldest first,
// and how many turns the project has.
func (s *Sweeper) overLimits(ctx context.Context, project string, pol Policy) ([]cardstore.TurnInfo, int, error) {
	cutoff := time.Time{}
	if pol.MaxAge > 0 {
		cutoff = s.cfg.Clock().Add(-pol.MaxAge)
	}
	var (
		over  []cardstore.TurnInfo
		total int
		bytes int64
	)
	req := cardstore.ListTurnsRequest{ProjectID: project, Limit: cardstore.MaxPage}
	for {
		page, err := s.cfg.Store.ListTurns(ctx, req)
		if err != nil {
			return nil, 0, fmt.Errorf("retention: list turns of %s: %w", project, err)
		}
		for _, ti := range page.Turns { // newest first
			total++
			bytes += ti.Bytes
			if (!cutoff.IsZero() && ti.LastAt.Before(cutoff)) || (pol.MaxBytes > 0 && bytes > pol.MaxBytes) {
				over = append(over, ti)
			}
		}
		if page.Next == 0 {
			break
		}
		req.Before = page.Next
	}
	for i, j := 0, len(over)-1; i < j; i, j = i+1, j-1 {
		over[i], over[j] = over[j], over[i]
	}
	return over, total, nil
}

// removeTurn archives and deletes one turn, or returns why it is kept.
func (s *Sweeper) removeTurn(ctx context.Context, project string, ti cardstore.TurnInfo, dryRun bool, r *Report) (kept string, err error) {
	if ti.ToolCalls > ti.ToolResults {
		return fmt.Sprintf("%d of its %d calls have no result yet", ti.ToolCalls-ti.ToolResults, ti.ToolCalls), nil
	}
	if ti.AgentID != "" {
		es, err := s.cfg.Inbox.List(ctx, project, inbox.ListQuery{AgentID: ti.AgentID, AgentTurnID: ti.AgentTurnID, State: inbox.StatePending, Limit: 1})
		if err != nil {
			return "", fmt.Errorf("retention: pending entries of turn %q: %w", ti.AgentTurnID, err)
		}
		if len(es) > 0 {
			return "a result its agent has not consumed (pending inbox entry " + es[0].InboxID + ")", nil
		}
	}
	if dryRun {
		r.Deleted = append(r.Deleted, ti.AgentTurnID)
		r.Cards += ti.Cards
		r.Bytes += ti.Bytes
		return "", nil
	}
	cards, err := cardstore.AllTurn(ctx, s.cfg.Store, project, ti.AgentTurnID)
	if err != nil {
		return "", fmt.Errorf("retention: read turn %q: %w", ti.AgentTurnID, err)
	}
	// A live claim keeps the turn (DeleteTurn would refuse it): check
	// before archiving, so the archive holds only turns that go.
	for _, c := range cards {
		if c.Type != card.TypeToolCall || c.ToolCallID == "" {
			continue
		}
		key := cardstore.CallKey{AgentTurnID: ti.AgentTurnID, ToolCallID: c.ToolCallID}.String()
		cl, err := s.cfg.Store.GetClaim(ctx, project, key)
		if errors.Is(err, cardstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("retention: claim of call %q of turn %q: %w", c.ToolCallID, ti.AgentTurnID, err)
		}
		return fmt.Sprintf("call %q has a live claim (held by %s): it is running or was abandoned without a result", c.ToolCallID, cl.Holder), nil
	}
	// The inbox first: its entries are pointers to the cards (the archive
	// keeps the cards), and a pending one it finds (an ack not yet
	// written) keeps the turn before anything is archived.
	entries, err := s.cfg.Inbox.DeleteTurn(ctx, project, ti.AgentTurnID)
	if errors.Is(err, inbox.ErrPending) {
		return err.Error(), nil
	}
	if err != nil {
		return "", fmt.Errorf("retention: delete inbox entries of turn %q: %w", ti.AgentTurnID, err)
	}
	if err := s.cfg.Archive.Archive(ctx, project, ti.AgentTurnID, cards); err != nil {
		return "", err
	}
	n, err := s.cfg.Store.DeleteTurn(ctx, project, ti.AgentTurnID)
	if errors.Is(err, cardstore.ErrClaimHeld) {
		return err.Error(), nil
	}
	if err != nil {
		return "", fmt.Errorf("retention: delete turn %q: %w", ti.AgentTurnID, err)
	}
	r.Deleted = append(r.Deleted, ti.AgentTurnID)
	r.Cards += n
	r.Entries += entries
	r.Bytes += ti.Bytes
	return "", nil
}
