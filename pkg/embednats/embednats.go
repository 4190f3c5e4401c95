// Package embednats runs a nats-server with JetStream inside the process: the
// broker of `utpmesh up` and of every test. It is the real server, not a mock.
//
// Durability: JetStream's default flushes its files to disk only every two
// minutes, so a power failure can lose messages that were already
// acknowledged. The embedded server therefore runs with SyncAlways (every
// write is fsync'd before the publish is acknowledged) unless the caller
// explicitly trades durability for speed with Config.SyncInterval.
//
// Caveats:
//   - JetStream files live in <DataDir>/jetstream; one data directory serves
//     one server at a time.
//   - Port -1 picks a free port (tests); 0 means the NATS default, 4222.
//   - MaxPayload bounds every message, JetStream or core: commands, reports,
//     wakeups and every svc request and reply (a CardStore put carries
//     whole cards). It must stay above the card size limit plus the request
//     envelope; `utpmesh up` checks that. nats-server warns above 8 MiB and
//     clients learn the limit when they connect.
//
// Access: with Config.Users the server admits only those nkey users, each
// with its permissions (SetUsers replaces them with a live reload); with
// Config.TLSCert/TLSKey the client port requires TLS, and Connect uses an
// in-process connection. Without either, anyone who reaches the port may
// do anything.
//
// Cluster: with Config.Cluster the server is one node of a NATS cluster:
// it listens for routes on Cluster.Listen, dials every node in
// Cluster.Routes, and runs clustered JetStream (Config.ServerName names it,
// Config.DataDir holds its own store). Why at least 3 nodes: JetStream
// keeps its metadata and every replicated stream in RAFT groups, and a
// group accepts a write only when a majority of its members (2 of 3) has
// stored it. With 2 nodes the majority is both, so the loss of either
// stops every write: two nodes are less available than one, and Start
// refuses fewer than MinClusterSize routes. What R3 means for writes: a
// stream or KV bucket with Replicas 3 has a copy on three nodes; its
// leader acknowledges a publish once 2 of the 3 copies have it, so with
// one node down writes go on (after a new leader is elected, if the lost
// node led) and every acknowledged write is still there when the node
// comes back; with two of three down the stream takes no writes.
// Routes are as open as the client port unless Cluster.Secret (a shared
// route password) or mutual TLS (Config.TLSCert/TLSKey with Cluster.CA) is
// set; a node with Config.Users requires one of them, since an open route
// port would let anyone join the cluster and bypass the users. Every
// node must be given the same Users (they are per node, not replicated).
//
// Storage faults: every server with JetStream runs a storage guard
// (health.go) that stops JetStream when its store cannot write (free space
// below Config.MinFreeBytes, a failed write probe, a stream's write
// error), so publishes fail at once instead of timing out, and starts it
// again, reloading every stream and consumer from disk, once the store
// writes again. On a cluster node the stop keeps the node's RAFT state
// (nats-server's ShutdownJetStream): the other nodes elect new leaders
// for what it led and go on with two of three replicas, and once the
// node's JetStream starts again it rejoins and catches up from them. Ready is the node's readiness: it names the fault, the
// lost quorum of a cluster node, or a stream that cannot write.
//
// Start-up failures are reported at once, not after ReadyTimeout: a fixed
// port that another socket holds fails before the server is created
// (ErrAddrInUse, "listen 127.0.0.1:4222: address already in use"), and a
// fatal error of the server's own start (it lost the port to another
// process after the check, its JetStream store cannot be opened) ends the
// wait with that error. A fatal error during start-up is returned, not
// logged, so the caller reports it once.
package embednats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/utpmesh/utpmesh/internal/portcheck"
)

// DefaultMaxPayload is the max message size the embedded server allows: large
// enough for the biggest CardStore reply (see cardstore limits).
const DefaultMaxPayload = 8 << 20

// Bounds of Config.MaxPayload.
const (
	// MinMaxPayload is the smallest accepted MaxPayload: below it even
	// ordinary svc replies (list_tools, a page of cards) stop fitting.
	MinMaxPayload = 64 << 10
	// MaxMaxPayload is the largest accepted MaxPayload (nats-server's own
	// ceiling for a message).
	MaxMaxPayload = 64 << 20
)

// Errors of Start.
var (
	// ErrInvalidConfig: a Config field is out of range; the message names
	// the field and the accepted values.
	ErrInvalidConfig = errors.New("embednats: invalid configuration")
	// ErrAddrInUse: another socket listens on Host:Port. The message is
	// "listen HOST:PORT: address already in use".
	ErrAddrInUse = portcheck.ErrInUse
	// ErrNotStarted: the server reported a fatal error while starting, or
	// was not ready within ReadyTimeout; the message says which.
	ErrNotStarted = errors.New("embednats: nats-server did not start")
)

// Config configures an embedded server.
type Config struct {
	// DataDir holds the JetStream store (DataDir/jetstream). Required when
	// JetStream is on.
	DataDir string
	// Host to listen on; default 127.0.0.1.
	Host string
	// Port to listen on; 0 means 4222, -1 a random free port.
	Port int
	// JetStream enables JetStream; `utpmesh up` and most tests want it.
	JetStream bool
	// SyncInterval, when positive, replaces fsync-before-ack with a periodic
	// flush. Zero (the default) keeps SyncAlways.
	SyncInterval time.Duration
	// MaxPayload is the largest message in bytes, between MinMaxPayload and
	// MaxMaxPayload; 0 means DefaultMaxPayload.
	MaxPayload int32
	// ServerName; default "utpmesh". A cluster node needs its own,
	// unique in the cluster.
	ServerName string
	// Cluster, when set, makes the server a node of a NATS cluster (see
	// Cluster); nil runs a single server.
	Cluster *Cluster
	// JetStreamDomain, when set, names the JetStream domain (the same on
	// every node of a cluster; letters, digits, '-', '_'). Clients of
	// another domain (leaf nodes) address this JetStream by it.
	JetStreamDomain string
	// Logger receives the server's notices and errors; nil keeps it quiet.
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for the server to accept connections;
	// default 10s. A busy port or a fatal start-up error ends it at once.
	ReadyTimeout time.Duration
	// TLSCert and TLSKey, when set (both PEM files), make the client port
	// require TLS with that certificate. Connect then uses an in-process
	// connection, which needs no certificate check.
	TLSCert, TLSKey string
	// MinFreeBytes is the storage guard's floor (any server with
	// JetStream): with less free space in the store's filesystem the
	// guard stops JetStream and the server is not Ready, and it starts
	// JetStream again once twice this much is free and the store writes.
	// 0 means MaxPayload (room for the largest message); -1 turns the
	// floor off (the write probe and stream write errors still count).
	MinFreeBytes int64
	// StorageCheck is how often the storage guard looks at the store;
	// default DefaultStorageCheck. A storage error in the server's log
	// makes it look at once.
	StorageCheck time.Duration
	// Users, when not empty, turns authentication on: only these nkey
	// users may connect, each limited to its Permissions (nil: all).
	// Empty: anyone who reaches the port may do anything.
	Users []User
}

// User is an nkey user of the server: a client proves it holds the seed
// of Nkey (the public key, "U…") by signing the server's nonce.
type User struct {
	// Nkey is the user's public nkey.
	Nkey string
	// Name is for logs and error messages (e.g. "agent-demo").
	Name string
	// Permissions limit what the user may publish and subscribe to; nil
	// allows everything.
	Permissions *server.Permissions
}

// Server is a running embedded nats-server.
type Server struct {
	ns    *server.Server
	cfg   Config
	logs  *slogAdapter
	guard *storageGuard // with JetStream; nil otherwise

	mu   sync.Mutex
	opts *server.Options
}

// Start starts the server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Port == 0 {
		cfg.Port = 4222
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = DefaultMaxPayload
	}
	if cfg.MaxPayload < MinMaxPayload || cfg.MaxPayload > MaxMaxPayload {
		return nil, fmt.Errorf("%w: MaxPayload %d bytes: use %d (64 KiB) to %d (64 MiB); the default is %d (8 MiB)",
			ErrInvalidConfig, cfg.MaxPayload, MinMaxPayload, MaxMaxPayload, DefaultMaxPayload)
	}
	if cfg.ServerName != "" && !tokenRE.MatchString(cfg.ServerName) {
		return nil, fmt.Errorf("%w: ServerName %q: use letters, digits, '-' or '_' (e.g. n1)", ErrInvalidConfig, cfg.ServerName)
	}
	if cfg.JetStreamDomain != "" && (!cfg.JetStream || !tokenRE.MatchString(cfg.JetStreamDomain)) {
		return nil, fmt.Errorf("%w: JetStreamDomain %q: needs JetStream on and a name of letters, digits, '-' or '_'", ErrInvalidConfig, cfg.JetStreamDomain)
	}
	var clusterOpts server.Options
	if cfg.Cluster != nil {
		if err := clusterOptions(cfg, &clusterOpts); err != nil {
			return nil, err
		}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = "utpmesh"
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	if cfg.MinFreeBytes < -1 {
		return nil, fmt.Errorf("%w: MinFreeBytes %d: use 0 (the default, MaxPayload), -1 (no floor) or a byte count", ErrInvalidConfig, cfg.MinFreeBytes)
	}
	if cfg.JetStream && cfg.DataDir == "" {
		return nil, fmt.Errorf("%w: JetStream needs a DataDir", ErrInvalidConfig)
	}
	var err error
	opts := &server.Options{
		ServerName: cfg.ServerName,
		Host:       cfg.Host,
		Port:       cfg.Port,
		MaxPayload: cfg.MaxPayload,
		NoSigs:     true,
		JetStream:  cfg.JetStream,
		Cluster:    clusterOpts.Cluster,
		Routes:     clusterOpts.Routes,

		JetStreamDomain: cfg.JetStreamDomain,
	}
	if opts.Nkeys, err = nkeyUsers(cfg.Users); err != nil {
		return nil, err
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, fmt.Errorf("%w: TLS needs both a certificate and its key (--tls-cert FILE --tls-key FILE)", ErrInvalidConfig)
	}
	if cfg.TLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey})
		if err != nil {
			return nil, fmt.Errorf("%w: TLS certificate %s / key %s: %v", ErrInvalidConfig, cfg.TLSCert, cfg.TLSKey, err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSTimeout = tc, true, 5
	}
	if cfg.JetStream {
		opts.StoreDir = filepath.Join(cfg.DataDir, "jetstream")
		if cfg.SyncInterval > 0 {
			opts.SyncInterval = cfg.SyncInterval
		} else {
			opts.SyncAlways = true
			opts.SyncInterval = 2 * time.Minute
		}
	}
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
	if cfg.Port > 0 {
		if err := portcheck.Free(addr); err != nil {
			return nil, err
		}
	}
	if opts.Cluster.Port > 0 {
		if err := portcheck.Free(net.JoinHostPort(opts.Cluster.Host, strconv.Itoa(opts.Cluster.Port))); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	ns, err := server.NewServer(opts) // NewServer fills opts' defaults in: SetUsers reloads a clone
	if err != nil {
		return nil, fmt.Errorf("embednats: configure server: %w", err)
	}
	logs := &slogAdapter{l: cfg.Logger, fatal: make(chan string, 1), kick: make(chan struct{}, 1)}
	ns.SetLoggerV2(logs, false, false, false)
	go ns.Start()
	if err := waitReady(ns, logs, addr, cfg.ReadyTimeout); err != nil {
		ns.Shutdown()
		return nil, err
	}
	logs.started()
	s := &Server{ns: ns, cfg: cfg, opts: opts, logs: logs}
	if cfg.JetStream {
		s.startGuard(logs)
	}
	return s, nil
}

func nkeyUsers(users []User) ([]*server.NkeyUser, error) {
	var out []*server.NkeyUser
	for _, u := range users {
		if !nkeys.IsValidPublicUserKey(u.Nkey) {
			return nil, fmt.Errorf("%w: user %q: %q is not a public user nkey (U…)", ErrInvalidConfig, u.Name, u.Nkey)
		}
		out = append(out, &server.NkeyUser{Nkey: u.Nkey, Permissions: u.Permissions})
	}
	return out, nil
}

// SetUsers replaces the nkey users of a server started with Config.Users
// (a live configuration reload: connected clients whose user is gone are
// disconnected, the others get the new permissions).
func (s *Server) SetUsers(users []User) error {
	if len(s.cfg.Users) == 0 {
		return fmt.Errorf("%w: SetUsers on a server started without users (authentication cannot be turned on live)", ErrInvalidConfig)
	}
	nk, err := nkeyUsers(users)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.opts.Clone()
	o.Nkeys = nk
	if err := s.ns.ReloadOptions(o); err != nil {
		return fmt.Errorf("embednats: reload users: %w", err)
	}
	s.opts = o
	s.cfg.Users = users
	return nil
}

// readyPoll is how long one readiness check waits before the start-up
// wait looks for a fatal error again.
const readyPoll = 50 * time.Millisecond

// waitReady waits until ns accepts connections, it reports a fatal error,
// or timeout passes.
func waitReady(ns *server.Server, logs *slogAdapter, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !ns.ReadyForConnections(readyPoll) {
		select {
		case msg := <-logs.fatal:
			if strings.Contains(msg, "address already in use") && strings.Contains(msg, "router") {
				return fmt.Errorf("cluster: %w: %s", ErrAddrInUse, msg)
			}
			if strings.Contains(msg, "address already in use") {
				return fmt.Errorf("listen %s: %w", addr, ErrAddrInUse)
			}
			return fmt.Errorf("%w: %s", ErrNotStarted, msg)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: not ready for connections on %s within %v", ErrNotStarted, addr, timeout)
		}
	}
	return nil
}

// ClientURL is the nats:// URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Connect opens a client connection to the server.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	if s.cfg.TLSCert != "" {
		// In-process: the server does not require TLS of it, and a
		// nats:// URL keeps the client from asking for it.
		return nats.Connect(strings.Replace(s.ClientURL(), "tls://", "nats://", 1), append(opts, nats.InProcessServer(s.ns))...)
	}
	return nats.Connect(s.ClientURL(), opts...)
}

// NATS returns the underlying server, for monitoring.
func (s *Server) NATS() *server.Server { return s.ns }

// Shutdown stops the server and waits until it has stopped or ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		if s.guard != nil {
			s.guard.close()
		}
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("embednats: shutdown: %w", ctx.Err())
	}
}

// slogAdapter hands the server's log to a slog.Logger (nil: nowhere).
// Until started is called a fatal error goes to the fatal channel instead
// of the log: Start returns it.
type slogAdapter struct {
	l     *slog.Logger
	fatal chan string
	// kick wakes the storage guard when the server logs a storage error.
	kick chan struct{}

	mu    sync.Mutex
	ready bool
}

func (a *slogAdapter) started() {
	a.mu.Lock()
	a.ready = true
	a.mu.Unlock()
}

func (a *slogAdapter) log(level slog.Level, format string, v []any) {
	if a.l != nil {
		a.l.Log(context.Background(), level, fmt.Sprintf(format, v...))
	}
}

func (a *slogAdapter) Noticef(format string, v ...any) { a.log(slog.LevelDebug, format, v) }
func (a *slogAdapter) Warnf(format string, v ...any) {
	a.storageError(format, v)
	a.log(slog.LevelWarn, format, v)
}
func (a *slogAdapter) Errorf(format string, v ...any) {
	a.storageError(format, v)
	a.log(slog.LevelError, format, v)
}

// storageError wakes the storage guard when a log line tells of a failed
// write (the server keeps no other signal of it a guard could wait on).
func (a *slogAdapter) storageError(format string, v []any) {
	msg := fmt.Sprintf(format, v...)
	if strings.Contains(msg, "no space left") || strings.Contains(msg, "write error") || strings.Contains(msg, "permission denied") ||
		strings.Contains(msg, "failed to store a msg") || strings.Contains(msg, "DISABLED") {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
}
func (a *slogAdapter) Debugf(format string, v ...any) { a.log(slog.LevelDebug, format, v) }
func (a *slogAdapter) Tracef(format string, v ...any) { a.log(slog.LevelDebug, format, v) }

func (a *slogAdapter) Fatalf(format string, v ...any) {
	a.mu.Lock()
	ready := a.ready
	a.mu.Unlock()
	if ready {
		a.log(slog.LevelError, format, v)
		return
	}
	select {
	case a.fatal <- fmt.Sprintf(format, v...):
	default: // the first fatal error is the one Start reports
	}
}
