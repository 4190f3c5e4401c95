package kit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/services/atlas"
)

// The holder lease of a local state: a CardStore claim on
// HolderKey(group) in project HolderProject, renewed every HolderLease/3.
const (
	HolderProject = "_atlas"
	HolderLease   = 30 * time.Second
	// holderStart bounds how long New waits for the CardStore.
	holderStart = 15 * time.Second
)

// holderLease is HolderLease; tests shorten it.
var holderLease = HolderLease

// HolderKey is the claim key of a group's local state.
func HolderKey(group string) string { return "atlas." + group + "/state" }

// holder is the held lease; its renewal loop runs until release.
type holder struct {
	st   cardstore.Store
	name string
	key  string
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// holderName names this process and its data directory in the lease:
// "pid N on host H, data directory D".
func holderName(dataDir string) string {
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("pid %d%s", os.Getpid(), holderPlace(host, dataDir))
}

func holderPlace(host, dataDir string) string {
	return " on host " + host + ", data directory " + dataDir
}

// holdLocal takes the holder lease of the group's local state. With a
// CardStore at hand it does so before New returns (a refusal fails New);
// with a late one (Deps.Resolve) it does so once the mesh is up, and a
// refusal then fails every call of the service.
func (s *Service) holdLocal() error {
	if s.deps.NC != nil && s.deps.Store != nil {
		ctx, cancel := context.WithTimeout(context.Background(), holderStart)
		defer cancel()
		h, err := s.acquire(ctx, s.deps.Store)
		if err != nil {
			return err
		}
		s.startHolder(h)
		return nil
	}
	go func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-s.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		_, st, err := s.deps.Conn(ctx)
		if err != nil {
			return // the service stopped before the mesh was up
		}
		h, err := s.acquire(ctx, st)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("refusing every call", "err", err)
				s.refuse(err)
			}
			return
		}
		s.startHolder(h)
	}()
	return nil
}

func (s *Service) startHolder(h *holder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		go h.release()
		return
	}
	s.holder = h
	h.wg.Add(1)
	go s.renew(h)
}

// acquire claims the lease, taking over one left by an earlier process on
// this host and data directory (this process holds the data file's lock,
// so that one is gone), and retrying while the CardStore is unreachable.
func (s *Service) acquire(ctx context.Context, st cardstore.Store) (*holder, error) {
	name := holderName(s.deps.DataDir)
	host, _ := os.Hostname()
	abs, _ := filepath.Abs(s.deps.DataDir)
	mine := holderPlace(host, abs)
	req := cardstore.ClaimRequest{ProjectID: HolderProject, Key: HolderKey(s.group), Holder: name, Lease: holderLease}
	tookOver := false
	for {
		_, err := st.Claim(ctx, req)
		if err == nil {
			// Held: now no worker of the replicated mode can start; one
			// that did before left its mark in the bucket (mode.go).
			if err := s.checkLocalMode(ctx); err != nil {
				_ = st.Release(ctx, HolderProject, req.Key, name)
				return nil, err
			}
			return &holder{st: st, name: name, key: req.Key, stop: make(chan struct{})}, nil
		}
		var held *cardstore.ClaimHeldError
		if errors.As(err, &held) {
			if strings.HasSuffix(held.Holder, mine) && !tookOver {
				tookOver = true
				if err := st.Release(ctx, HolderProject, req.Key, held.Holder); err != nil && !errors.Is(err, cardstore.ErrClaimLost) {
					return nil, fmt.Errorf("atlas.%s: take over the local state from %s (gone: this process holds its file): %w", s.group, held.Holder, err)
				}
				continue
			}
			return nil, s.heldError(held.Holder, held.ExpiresAt)
		}
		if errors.Is(err, cardstore.ErrInvalid) || ctx.Err() != nil {
			return nil, fmt.Errorf("atlas.%s: could not take the holder lease of its local state in the CardStore: %w (is the mesh up?)", s.group, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// checkLocalMode refuses the local state when the group's bucket records
// the replicated mode.
func (s *Service) checkLocalMode(ctx context.Context) error {
	nc, _, err := s.deps.Conn(ctx)
	if err != nil {
		return fmt.Errorf("atlas.%s: %w", s.group, err)
	}
	return checkLocal(ctx, nc, s.group)
}

func (s *Service) heldError(by string, until time.Time) error {
	return fmt.Errorf("%w: atlas.%s state (%s) is held by %s (lease until %s): run one worker of atlas.%s per mesh with the local state — stop that one or do not serve atlas.%s here — or start every worker of it with the replicated state (%s)",
		ErrStateHeld, s.group, filepath.Base(atlas.DBPath(s.deps.DataDir, s.group)), by, until.UTC().Format(time.RFC3339),
		s.group, s.group, atlas.StateFlagHint)
}

// renew keeps the lease until release; losing it to another holder
// refuses every later call.
func (s *Service) renew(h *holder) {
	defer h.wg.Done()
	lease := holderLease
	t := time.NewTicker(lease / 3)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), lease/3)
		c, err := h.st.Claim(ctx, cardstore.ClaimRequest{ProjectID: HolderProject, Key: h.key, Holder: h.name, Lease: lease})
		cancel()
		var held *cardstore.ClaimHeldError
		switch {
		case err == nil && c.TakenOver:
			s.log.Warn("the local state's holder lease had lapsed and was taken again", "previous_holder", c.PreviousHolder)
		case errors.As(err, &held):
			err = s.heldError(held.Holder, held.ExpiresAt)
			s.log.Error("lost the local state to another process (the lease lapsed while the CardStore was unreachable); refusing every call", "err", err)
			s.refuse(err)
			return
		case err != nil:
			s.log.Warn("renewing the local state's holder lease failed; retrying", "err", err)
		}
	}
}

// release stops the renewal and gives the lease up (best effort).
func (h *holder) release() {
	h.once.Do(func() {
		close(h.stop)
		h.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.st.Release(ctx, HolderProject, h.key, h.name)
	})
}

func (s *Service) refuse(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refused == nil {
		s.refused = err
	}
}

// Refused returns why the service refuses calls (nil: it serves them).
func (s *Service) Refused() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}
