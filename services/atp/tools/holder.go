package tools

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
	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/state"
)

// The holder lease of ATP's local state (atp.StateBolt): a CardStore claim
// on HolderKey in project HolderProject, renewed every HolderLease/3. A
// second worker of the local state elsewhere is refused by it, and a
// worker of the replicated state reads it (checkNoLocalHolder).
const (
	HolderProject = "_atp"
	HolderKey     = "atp/state"
	HolderLease   = 30 * time.Second
)

// ErrStateHeld: another process serves ATP's local state; its message
// names the holder and says what to do.
var ErrStateHeld = errors.New("atp: local state held by another process")

// holder is a held lease; release gives it up.
type holder struct {
	st   cardstore.Store
	name string
	log  *slog.Logger
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// holdLocal takes the holder lease: "pid N on host H, data directory D".
// A lease left by an earlier process on this host and data directory is
// taken over (this process holds the directory's lock, so it is gone).
func holdLocal(ctx context.Context, st cardstore.Store, dataDir string, log *slog.Logger) (*holder, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	host, _ := os.Hostname()
	place := " on host " + host + ", data directory " + abs
	name := fmt.Sprintf("pid %d%s", os.Getpid(), place)
	req := cardstore.ClaimRequest{ProjectID: HolderProject, Key: HolderKey, Holder: name, Lease: HolderLease}
	for tookOver := false; ; {
		_, err := st.Claim(ctx, req)
		var held *cardstore.ClaimHeldError
		switch {
		case err == nil:
			h := &holder{st: st, name: name, log: log, stop: make(chan struct{})}
			h.wg.Add(1)
			go h.renew()
			return h, nil
		case errors.As(err, &held) && strings.HasSuffix(held.Holder, place) && !tookOver:
			tookOver = true
			if err := st.Release(ctx, HolderProject, HolderKey, held.Holder); err != nil && !errors.Is(err, cardstore.ErrClaimLost) {
				return nil, fmt.Errorf("atp: take over the local state from %s: %w", held.Holder, err)
			}
		case errors.As(err, &held):
			return nil, fmt.Errorf("%w: atp's local state (%s) is held by %s (lease until %s): run one atp worker with the local state per mesh — stop that one — or start every atp worker with the shared state (%s)",
				ErrStateHeld, atp.StateFile, held.Holder, held.ExpiresAt.UTC().Format(time.RFC3339), atp.StateFlagHint)
		default:
			return nil, fmt.Errorf("atp: take the holder lease of the local state in the CardStore: %w (is the mesh up?)", err)
		}
	}
}

func (h *holder) renew() {
	defer h.wg.Done()
	t := time.NewTicker(HolderLease / 3)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), HolderLease/3)
		_, err := h.st.Claim(ctx, cardstore.ClaimRequest{ProjectID: HolderProject, Key: HolderKey, Holder: h.name, Lease: HolderLease})
		cancel()
		if err != nil {
			h.log.Warn("atp: renewing the local state's holder lease failed; retrying", "err", err)
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
		_ = h.st.Release(ctx, HolderProject, HolderKey, h.name)
	})
}

// checkNoLocalHolder fails with state.ErrModeMismatch when a worker serves
// ATP from its local state (its holder lease is live). It only reads the
// lease.
func checkNoLocalHolder(ctx context.Context, st cardstore.Store) error {
	c, err := st.GetClaim(ctx, HolderProject, HolderKey)
	switch {
	case errors.Is(err, cardstore.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("atp: check the service's state mode in the CardStore: %w (is the mesh up?)", err)
	case c.Expired:
		return nil
	}
	return fmt.Errorf("%w: atp is served from its local file (%s) by %s, and this worker was started with the shared state: every atp worker uses one state mode — start this one with --atp-state bolt on that host and data directory, or stop that one and start every atp worker with --atp-state jetstream",
		state.ErrModeMismatch, atp.StateFile, c.Holder)
}
