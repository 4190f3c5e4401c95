// Package holder is the holder lease of a tool service's local state
// (the state engine's bolt mode): a CardStore claim, renewed while the
// process serves the state, that names the process ("pid N on host H,
// data directory D"). A second worker of the local mode elsewhere is
// refused by it, and a worker of the replicated mode reads it (CheckFree)
// and refuses to start while it is live (state.ErrModeMismatch), so that
// no service is served from two modes at once.
package holder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/services/state"
)

// Lease is how long a lease lives without renewal; it is renewed every
// Lease/3.
const Lease = 30 * time.Second

// ErrHeld: another process serves the service's local state; its message
// names the holder and says what to do.
var ErrHeld = errors.New("state: local state held by another process")

// Spec names a service's lease and what the refusals tell the operator.
type Spec struct {
	// Service is the service's name (cynode).
	Service string
	// Project and Key are the claim's CardStore project and key.
	Project, Key string
	// File is the local state's file name, for messages.
	File string
	// FlagHint is how an operator picks a worker's state mode
	// ("utpmesh worker --cynode-state jetstream|bolt cynode").
	FlagHint string
	// LocalFlag and SharedFlag, when set, are the flags of the two modes
	// ("--atp-state bolt", "--atp-state jetstream"), which CheckFree's
	// refusal then names; otherwise it says "the local state" and "the
	// shared state".
	LocalFlag, SharedFlag string
	// Lease is how long the lease lives without renewal; it is renewed
	// every Lease/3. 0: the package's Lease.
	Lease time.Duration
}

func (s Spec) lease() time.Duration {
	if s.Lease > 0 {
		return s.Lease
	}
	return Lease
}

// Options are what TakeWith adds to Take.
type Options struct {
	// Retry asks the CardStore again, every RetryPause, while it fails
	// (unreachable, no answer) until ctx ends, instead of failing at once:
	// for a service that takes its lease while the mesh starts.
	Retry bool
	// Check runs once the lease is held; its error gives the lease up
	// and fails the take (e.g. the service's bucket records the shared
	// mode).
	Check func(ctx context.Context) error
	// Lost is called once, from the renewal, with an ErrHeld error when
	// another process holds the lease (it lapsed while this one could not
	// renew it); the renewal then stops. Nil: the renewal logs a warning
	// and keeps trying.
	Lost func(err error)
}

// RetryPause is the pause between two asks of Options.Retry.
const RetryPause = 250 * time.Millisecond

// Held is a held lease; Release gives it up.
type Held struct {
	spec Spec
	st   cardstore.Store
	name string
	log  *slog.Logger
	lost func(error)
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// Take takes the lease for the process serving dataDir. A lease left by
// an earlier process on this host and data directory is taken over (this
// process holds the directory's lock, so that one is gone).
func Take(ctx context.Context, st cardstore.Store, spec Spec, dataDir string, log *slog.Logger) (*Held, error) {
	return TakeWith(ctx, st, spec, dataDir, log, Options{})
}

// TakeWith is Take with opts.
func TakeWith(ctx context.Context, st cardstore.Store, spec Spec, dataDir string, log *slog.Logger, opts Options) (*Held, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	host, _ := os.Hostname()
	place := " on host " + host + ", data directory " + abs
	name := fmt.Sprintf("pid %d%s", os.Getpid(), place)
	req := cardstore.ClaimRequest{ProjectID: spec.Project, Key: spec.Key, Holder: name, Lease: spec.lease()}
	for tookOver := false; ; {
		_, err := st.Claim(ctx, req)
		var held *cardstore.ClaimHeldError
		switch {
		case err == nil:
			if opts.Check != nil {
				if err := opts.Check(ctx); err != nil {
					_ = st.Release(ctx, spec.Project, spec.Key, name)
					return nil, err
				}
			}
			h := &Held{spec: spec, st: st, name: name, log: log, lost: opts.Lost, stop: make(chan struct{})}
			h.wg.Add(1)
			go h.renew()
			return h, nil
		case errors.As(err, &held) && strings.HasSuffix(held.Holder, place) && !tookOver:
			tookOver = true
			if err := st.Release(ctx, spec.Project, spec.Key, held.Holder); err != nil && !errors.Is(err, cardstore.ErrClaimLost) {
				return nil, fmt.Errorf("%s: take over the local state from %s: %w", spec.Service, held.Holder, err)
			}
		case errors.As(err, &held):
			return nil, heldError(spec, held)
		case opts.Retry && !errors.Is(err, cardstore.ErrInvalid) && ctx.Err() == nil:
			select {
			case <-ctx.Done():
			case <-time.After(RetryPause):
			}
		default:
			return nil, fmt.Errorf("%s: take the holder lease of the local state in the CardStore: %w (is the mesh up?)", spec.Service, err)
		}
	}
}

// heldError is the refusal of a lease another process holds.
func heldError(spec Spec, held *cardstore.ClaimHeldError) error {
	return fmt.Errorf("%w: %s's local state (%s) is held by %s (lease until %s): run one %s worker with the local state per mesh — stop that one — or start every %s worker with the shared state (%s)",
		ErrHeld, spec.Service, spec.File, held.Holder, held.ExpiresAt.UTC().Format(time.RFC3339), spec.Service, spec.Service, spec.FlagHint)
}

func (h *Held) renew() {
	defer h.wg.Done()
	lease := h.spec.lease()
	t := time.NewTicker(lease / 3)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), lease/3)
		c, err := h.st.Claim(ctx, cardstore.ClaimRequest{ProjectID: h.spec.Project, Key: h.spec.Key, Holder: h.name, Lease: lease})
		cancel()
		var held *cardstore.ClaimHeldError
		switch {
		case err == nil && c.TakenOver && h.log != nil:
			h.log.Warn(h.spec.Service+": the local state's holder lease had lapsed and was taken again", "previous_holder", c.PreviousHolder)
		case errors.As(err, &held) && h.lost != nil:
			h.lost(heldError(h.spec, held))
			return
		case err != nil && h.log != nil:
			h.log.Warn(h.spec.Service+": renewing the local state's holder lease failed; retrying", "err", err)
		}
	}
}

// Release stops the renewal and gives the lease up (best effort); it is
// idempotent.
func (h *Held) Release() {
	h.once.Do(func() {
		close(h.stop)
		h.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.st.Release(ctx, h.spec.Project, h.spec.Key, h.name)
	})
}

// CheckFree fails with state.ErrModeMismatch while a worker serves the
// service from its local state (its lease is live). It only reads the
// lease.
func CheckFree(ctx context.Context, st cardstore.Store, spec Spec) error {
	c, err := st.GetClaim(ctx, spec.Project, spec.Key)
	switch {
	case errors.Is(err, cardstore.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("%s: check the service's state mode in the CardStore: %w (is the mesh up?)", spec.Service, err)
	case c.Expired:
		return nil
	}
	local, shared := "the local state", "the shared state"
	if spec.LocalFlag != "" {
		local = spec.LocalFlag
	}
	if spec.SharedFlag != "" {
		shared = spec.SharedFlag
	}
	return fmt.Errorf("%w: %s is served from its local file (%s) by %s, and this worker was started with the shared state: every %s worker uses one state mode — start this one with %s on that host and data directory, or stop that one and start every %s worker with %s (%s)",
		state.ErrModeMismatch, spec.Service, spec.File, c.Holder, spec.Service, local, spec.Service, shared, spec.FlagHint)
}
