package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Errors of Serve.
var (
	// ErrListen: the metrics address could not be listened on (bad
	// host:port, port in use, permission).
	ErrListen = errors.New("metrics: cannot listen")
)

// ServerConfig configures Serve.
type ServerConfig struct {
	// Addr is host:port to listen on; port 0 picks a free port.
	Addr string
	// Health, when set, is called by /healthz (liveness: is the process
	// alive and started): nil error → 200 "ok", otherwise 503 with the
	// error text. Unset, /healthz always answers ok while the server runs.
	Health func() error
	// Ready, when set, is called by /readyz (readiness: can the node take
	// calls now; JetStream on and in quorum, the disk not full, the
	// stores writing): nil → 200 "ready", otherwise 503 with the error
	// text. Unset, /readyz answers as /healthz does. Serve also makes
	// the utpmesh_ready gauge read it.
	Ready func() error
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Server serves /metrics, /healthz and /readyz over HTTP.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// Serve listens on cfg.Addr at once (so a taken port fails here, not later)
// and serves m's registry on /metrics, liveness on /healthz and readiness
// on /readyz until Shutdown.
func Serve(m *Metrics, cfg ServerConfig) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return nil, fmt.Errorf("%w: address %q: %v (want host:port, e.g. 127.0.0.1:9464)", ErrListen, cfg.Addr, err)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrListen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn), Timeout: 10 * time.Second,
	}))
	mux.HandleFunc("GET /healthz", probeHandler("ok", cfg.Health))
	ready := cfg.Ready
	if ready == nil {
		ready = cfg.Health
	}
	mux.HandleFunc("GET /readyz", probeHandler("ready", ready))
	if ready != nil {
		m.WatchReady(ready)
	}
	s := &Server{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Error("metrics server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return s, nil
}

// probeHandler answers 200 and ok when check is nil or passes, else 503
// with check's error.
func probeHandler(ok string, check func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if check != nil {
			if err := check(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte(ok + "\n"))
	}
}

// Addr is the address the server listens on (with the real port when
// ServerConfig.Addr had port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the /metrics URL.
func (s *Server) URL() string { return "http://" + s.Addr() + "/metrics" }

// Shutdown stops accepting scrapes and waits for those in progress until
// ctx ends, then closes the rest.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
		err = fmt.Errorf("metrics: shutdown: %w", err)
	}
	<-s.done
	return err
}
