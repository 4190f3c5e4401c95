package kit

import (
	"context"
	"path/filepath"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/state/holder"
)

// The holder lease of a group's local state (services/state/holder): a
// CardStore claim on HolderKey(group) in project HolderProject, renewed
// every HolderLease/3.
const (
	HolderProject = "_atlas"
	HolderLease   = holder.Lease
	// holderStart bounds how long New waits for the CardStore.
	holderStart = 15 * time.Second
)

// holderLease is HolderLease; tests shorten it.
var holderLease = HolderLease

// HolderKey is the claim key of a group's local state.
func HolderKey(group string) string { return "atlas." + group + "/state" }

// holderSpec names the group's lease and the flags its refusals name.
func holderSpec(group string) holder.Spec {
	return holder.Spec{Service: "atlas." + group, Project: HolderProject, Key: HolderKey(group),
		File: filepath.Base(atlas.DBPath(".", group)), FlagHint: atlas.StateFlagHint,
		LocalFlag: "--atlas-state " + atlas.StateBolt, SharedFlag: "--atlas-state " + atlas.StateJetStream, Lease: holderLease}
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

// acquire takes the lease (holder.TakeWith), retrying while the CardStore
// is unreachable; once held, a group whose bucket records the replicated
// mode is refused (mode.go). Losing the lease later to another process
// refuses every call.
func (s *Service) acquire(ctx context.Context, st cardstore.Store) (*holder.Held, error) {
	return holder.TakeWith(ctx, st, holderSpec(s.group), s.deps.DataDir, s.log, holder.Options{
		Retry: true,
		Check: s.checkLocalMode,
		Lost: func(err error) {
			s.log.Error("lost the local state to another process (the lease lapsed while the CardStore was unreachable); refusing every call", "err", err)
			s.refuse(err)
		},
	})
}

func (s *Service) startHolder(h *holder.Held) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		go h.Release()
		return
	}
	s.holder = h
}

// checkLocalMode refuses the local state when the group's bucket records
// the replicated mode.
func (s *Service) checkLocalMode(ctx context.Context) error {
	nc, _, err := s.deps.Conn(ctx)
	if err != nil {
		return err
	}
	return checkLocal(ctx, nc, s.group)
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
