package embednats

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Storage guard defaults (Config.MinFreeBytes, Config.StorageCheck).
const (
	// DefaultStorageCheck is how often the guard looks at the store.
	DefaultStorageCheck = time.Second
	// probeName is the file the guard writes and fsyncs in the store
	// directory to learn whether the store can write.
	probeName = ".utpmesh-write-probe"
	// probeBytes is what the probe writes: one page, enough for a full
	// filesystem to refuse it.
	probeBytes = 4096
)

// ErrNotReady: Ready found the server unable to take writes; the
// message says why (JetStream off after a storage fault, the disk below
// Config.MinFreeBytes, a stream's write error, no JetStream quorum).
var ErrNotReady = errors.New("embednats: not ready")

// Ready tells whether the server can take JetStream writes now: nil, or
// an error wrapping ErrNotReady that names the cause and what is done
// about it. It is the readiness of the node (pkg/metrics serves it on
// /readyz), not its liveness. Not ready: JetStream is off (the storage
// guard stopped it, or nats-server did after a write error); the store
// directory has less than Config.MinFreeBytes free or cannot be written;
// a stream has a write error; on a cluster node, JetStream has no meta
// leader (the node lost its quorum) or an asset it holds is not current.
func (s *Server) Ready() error {
	if !s.cfg.JetStream {
		if !s.ns.ReadyForConnections(0) {
			return fmt.Errorf("%w: nats-server does not accept connections", ErrNotReady)
		}
		return nil
	}
	if g := s.guard; g != nil {
		if cause := g.fault(); cause != "" {
			return fmt.Errorf("%w: %s", ErrNotReady, cause)
		}
	}
	if !s.ns.JetStreamEnabled() {
		return fmt.Errorf("%w: JetStream is disabled", ErrNotReady)
	}
	if h := s.ns.Healthz(nil); h.Error != "" || h.StatusCode >= 300 {
		msg := h.Error
		if msg == "" {
			msg = h.Status
		}
		if strings.Contains(msg, "meta leader") {
			msg += " (the node does not reach a majority of the cluster: no quorum, writes are refused)"
		}
		return fmt.Errorf("%w: %s", ErrNotReady, msg)
	}
	return nil
}

// Quorum tells whether JetStream leaders can be had through this node
// now, which is what a client waiting out an election needs to know:
// nil, or an error wrapping ErrNotReady that says why not. A cluster
// node has them while it is routed to a majority of the cluster's nodes
// (Cluster.Routes): an election under way then ends with a leader, on
// this node or another (even while its own JetStream is stopped by the
// storage guard, its clients are served by the others through the
// routes); the error says how many nodes it reaches. A single node has
// them while JetStream is on without a storage fault. Unlike Ready it is
// nil during an election, and it reads only this node's state (no
// request, no asset scan): cheap enough to ask before each call and each
// retry. A route to a node that vanished without closing it counts until
// nats-server's pings drop it.
func (s *Server) Quorum() error {
	if !s.cfg.JetStream {
		return fmt.Errorf("%w: JetStream is off", ErrNotReady)
	}
	if c := s.cfg.Cluster; c != nil {
		size := max(len(c.Routes), 1)
		if reach := s.ns.NumRemotes() + 1; 2*reach <= size {
			return fmt.Errorf("%w: no quorum: this node reaches %d of the cluster's %d nodes, and JetStream elects leaders only with a majority (%d); writes are refused until enough nodes are back",
				ErrNotReady, reach, size, size/2+1)
		}
		return nil
	}
	if cause := s.StorageFault(); cause != "" {
		return fmt.Errorf("%w: %s", ErrNotReady, cause)
	}
	if !s.ns.JetStreamEnabled() {
		return fmt.Errorf("%w: JetStream is disabled", ErrNotReady)
	}
	return nil
}

// StorageFault is why the storage guard holds JetStream stopped (the
// cause Ready names), or "" while the store writes. A node with a
// storage fault is alive: it starts JetStream again by itself.
func (s *Server) StorageFault() string {
	if s.guard == nil {
		return ""
	}
	return s.guard.fault()
}

// storageGuard watches a server's JetStream store. nats-server
// keeps a stream's write error (ENOSPC, EIO, EACCES) until the stream is
// reloaded: every later publish is dropped unanswered (publishers time
// out) even once space is back. The guard therefore stops JetStream as
// soon as the store cannot write (a stream's write error, a failed write
// probe, or free space below the floor) — publishes then fail at once with
// "no responders" instead of timing out — and starts it again, reloading
// every stream and consumer from disk, once the probe writes and free
// space is back above twice the floor. Messages acknowledged before the
// fault are on disk (SyncAlways) and come back with the reload.
//
// On a cluster node the stop is nats-server's ShutdownJetStream, which
// hands over the meta leadership, stops the node's RAFT groups and keeps
// their state on disk: the other two nodes elect leaders for whatever it
// led and keep taking writes (2 of 3 replicas), and a client of this node
// is served by them through the routes. The restart rejoins the meta
// group and every stream's group, and the node catches up from the
// current leaders, messages stored while it was stopped included.
// nats-server does the same stop by itself when a RAFT write hits ENOSPC;
// the guard is what starts JetStream again.
type storageGuard struct {
	s        *Server
	dir      string // the store directory handed to nats-server (probe, statfs, restart)
	minFree  int64
	every    time.Duration
	jsConfig server.JetStreamConfig // as nats-server settled it at start
	kick     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}

	mu    sync.Mutex
	cause string // "" while healthy
}

// startGuard starts the storage guard of a JetStream server.
func (s *Server) startGuard(logs *slogAdapter) {
	jc := s.ns.JetStreamConfig()
	if jc == nil {
		return
	}
	minFree := s.cfg.MinFreeBytes
	if minFree == 0 {
		minFree = int64(s.cfg.MaxPayload)
	}
	every := s.cfg.StorageCheck
	if every <= 0 {
		every = DefaultStorageCheck
	}
	g := &storageGuard{s: s, dir: s.opts.StoreDir, minFree: minFree, every: every, jsConfig: *jc,
		kick: logs.kick, stop: make(chan struct{}), done: make(chan struct{})}
	s.guard = g
	go g.run()
}

func (g *storageGuard) fault() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cause
}

func (g *storageGuard) setFault(cause string) {
	g.mu.Lock()
	g.cause = cause
	g.mu.Unlock()
}

// close stops the guard and waits for it; Shutdown may call it more
// than once.
func (g *storageGuard) close() {
	g.stopOnce.Do(func() { close(g.stop) })
	<-g.done
}

func (g *storageGuard) run() {
	defer close(g.done)
	tick := time.NewTicker(g.every)
	defer tick.Stop()
	for {
		g.check()
		select {
		case <-g.stop:
			return
		case <-tick.C:
		case <-g.kick:
		}
	}
}

// check looks at the store once: it stops JetStream on a fault and
// starts it again once the store writes.
func (g *storageGuard) check() {
	ns, log := g.s.ns, g.s.logs
	free, freeErr := diskFree(g.dir)
	probeErr := probe(g.dir)
	if cause := g.fault(); cause != "" {
		if probeErr != nil || (freeErr == nil && free < 2*g.minFree) {
			return // still faulty
		}
		if !ns.JetStreamEnabled() {
			cfg := g.jsConfig
			// EnableJetStream appends "jetstream" to StoreDir again.
			cfg.StoreDir = g.dir
			if err := ns.EnableJetStream(&cfg); err != nil {
				log.log(slog.LevelError, "storage guard: JetStream could not be started again (retrying): %v", []any{err})
				return
			}
		}
		g.setFault("")
		log.log(slog.LevelWarn, "storage guard: the store writes again (%s free in %s); JetStream is started again, every stream and consumer reloaded from disk (was: %s)",
			[]any{bytesText(free), g.dir, cause})
		return
	}
	var cause string
	switch {
	case freeErr == nil && free < g.minFree:
		cause = fmt.Sprintf("disk full: %s free in %s, below the %s floor", bytesText(free), g.dir, bytesText(g.minFree))
	case probeErr != nil:
		cause = fmt.Sprintf("the JetStream store cannot write (%v)", probeErr)
	case !ns.JetStreamEnabled():
		cause = "nats-server disabled JetStream after a storage error"
	default:
		if werr := streamWriteError(ns); werr != "" {
			cause = werr
		}
	}
	if cause == "" {
		return
	}
	g.setFault(cause + "; JetStream is stopped (publishes fail at once) and starts again by itself once the store writes and has twice the floor free")
	log.log(slog.LevelError, "storage guard: %s; stopping JetStream until the store writes again (free space: %s)", []any{cause, bytesText(free)})
	if ns.JetStreamEnabled() {
		if err := ns.ShutdownJetStream(); err != nil {
			log.log(slog.LevelError, "storage guard: stop JetStream: %v", []any{err})
		}
	}
}

// streamWriteError is the first stream write error nats-server reports
// ("" when none).
func streamWriteError(ns *server.Server) string {
	h := ns.Healthz(nil)
	if strings.Contains(h.Error, "write error") {
		return h.Error
	}
	return ""
}

// probe writes, fsyncs and removes a small file in dir.
func probe(dir string) error {
	name := filepath.Join(dir, probeName)
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(make([]byte, probeBytes))
	serr := f.Sync()
	cerr := f.Close()
	rerr := os.Remove(name)
	return errors.Join(werr, serr, cerr, rerr)
}

// bytesText prints a byte count in KiB/MiB/GiB.
func bytesText(n int64) string {
	switch {
	case n < 0:
		return "unknown"
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d KiB", n>>10)
	}
}
