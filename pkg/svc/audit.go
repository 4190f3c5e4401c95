package svc

import (
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/internal/audit"
)

// Conn returns the NATS connection the server serves on.
func (s *Server) Conn() *nats.Conn { return s.nc }

// Version returns the protocol version token the server serves.
func (s *Server) Version() string { return s.cfg.Version }

// Logger returns the server's logger (Config.Logger or slog.Default()).
func (s *Server) Logger() *slog.Logger { return s.cfg.Logger }

// Audit publishes rec on the service's audit subject (internal/audit,
// evt.sys.audit.<service>), filling Service and Time when unset. A record
// that cannot be published is logged, never returned: an audit failure
// does not change the reply.
func (s *Server) Audit(rec audit.Record) {
	if rec.Service == "" {
		rec.Service = s.cfg.Service
	}
	if rec.Time.IsZero() {
		rec.Time = time.Now().UTC()
	}
	if err := audit.Publish(s.nc, s.cfg.Version, rec); err != nil {
		s.cfg.Logger.Error(s.cfg.Service+": audit record not published", "subject", rec.Subject, "err", err)
	}
}
