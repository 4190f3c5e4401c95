// Package toolsvc serves the tool-scoped operations of a mesh service,
//
//	cg.<ver>.<project_id>.<channel_id>.svc.<service>.<op>.<tool>
//
// (subjects.ToolService), with pkg/svc's wire format: a JSON request, a
// JSON reply, or {"error": {"code", "message", "detail"}} with the code in
// the Svc-Error-Code header, so svc.Call is the client. pkg/svc's server
// dispatches seven-token subjects only; these carry one token more, the
// tool whose worker identity alone may publish them (internal/meshauth),
// which is what the handler may rely on.
package toolsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// headerErrorCode is pkg/svc's error header.
const headerErrorCode = "Svc-Error-Code"

// Handler handles one request on a tool-scoped subject.
type Handler func(ctx context.Context, ts subjects.ToolSubject, data []byte) (any, error)

// Config configures a Server.
type Config struct {
	// Version and Service choose the subjects: cg.<Version>.*.*.svc.<Service>.*.*.
	Version, Service string
	// Codes maps the service's sentinel errors to wire codes.
	Codes svc.Codes
	// Concurrency bounds the requests handled at once; default 64.
	Concurrency int
	// RequestTimeout bounds one request; default 30s.
	RequestTimeout time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Server serves one service's tool-scoped operations.
type Server struct {
	cfg Config
	sub *nats.Subscription
	sem chan struct{}
	wg  sync.WaitGroup
	h   Handler
}

// Start subscribes (queue group utpmesh-<service>) and serves h.
func Start(nc *nats.Conn, cfg Config, h Handler) (*Server, error) {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 64
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Version == "" {
		cfg.Version = subjects.DefaultVersion
	}
	pattern, err := subjects.ToolServicePattern(cfg.Version, cfg.Service)
	if err != nil {
		return nil, fmt.Errorf("toolsvc: %w", err)
	}
	s := &Server{cfg: cfg, sem: make(chan struct{}, cfg.Concurrency), h: h}
	sub, err := nc.QueueSubscribe(pattern, "utpmesh-"+cfg.Service, func(m *nats.Msg) {
		s.sem <- struct{}{}
		s.wg.Add(1)
		go func() {
			defer func() { <-s.sem; s.wg.Done() }()
			s.serve(m)
		}()
	})
	if err != nil {
		return nil, fmt.Errorf("toolsvc: subscribe %s: %w", pattern, err)
	}
	_ = sub.SetPendingLimits(1<<16, 256<<20)
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("toolsvc: flush %s: %w", pattern, err)
	}
	s.sub = sub
	return s, nil
}

// Stop stops taking requests and waits, until ctx ends, for those in flight.
func (s *Server) Stop(ctx context.Context) error {
	if s == nil {
		return nil
	}
	if s.sub.IsValid() {
		_ = s.sub.Unsubscribe()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("toolsvc: %s: requests still in flight: %w", s.cfg.Service, ctx.Err())
	}
}

func (s *Server) serve(m *nats.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	defer cancel()
	var reply any
	ts, err := subjects.ParseToolService(m.Subject)
	if err != nil {
		err = fmt.Errorf("%w: %v", svc.ErrBadRequest, err)
	} else if ts.Service != s.cfg.Service {
		err = fmt.Errorf("%w: service %q is not %s", svc.ErrBadRequest, ts.Service, s.cfg.Service)
	} else {
		reply, err = s.call(ctx, ts, m.Data)
	}
	if m.Reply == "" {
		return
	}
	if err == nil {
		body, mErr := json.Marshal(reply)
		if mErr == nil {
			_ = m.Respond(body)
			return
		}
		err = fmt.Errorf("encode reply: %w", mErr)
	}
	code := CodeOf(s.cfg.Codes, err)
	s.cfg.Logger.Debug("tool-scoped request failed", "service", s.cfg.Service, "subject", m.Subject, "code", code, "err", err)
	eb := svc.ErrorBody{Code: code, Message: err.Error()}
	var de *svc.DetailError
	if errors.As(err, &de) && de.Detail != nil {
		eb.Detail, _ = json.Marshal(de.Detail)
	}
	body, _ := json.Marshal(map[string]any{"error": eb})
	out := nats.NewMsg(m.Reply)
	out.Header.Set(headerErrorCode, code)
	out.Data = body
	_ = m.RespondMsg(out)
}

// call runs the handler, turning a panic into an internal error.
func (s *Server) call(ctx context.Context, ts subjects.ToolSubject, data []byte) (reply any, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.cfg.Logger.Error("tool-scoped handler panic", "service", s.cfg.Service, "op", ts.Op, "panic", r)
			err = fmt.Errorf("internal error in %s.%s", s.cfg.Service, ts.Op)
		}
	}()
	return s.h(ctx, ts, data)
}

// CodeOf maps err to its wire code as pkg/svc's server does.
func CodeOf(codes svc.Codes, err error) string {
	for _, c := range codes {
		if errors.Is(err, c.Err) {
			return c.Code
		}
	}
	switch {
	case errors.Is(err, svc.ErrBadRequest):
		return svc.CodeBadRequest
	case errors.Is(err, svc.ErrTooLarge):
		return svc.CodeTooLarge
	case errors.Is(err, context.DeadlineExceeded):
		return svc.CodeTimeout
	}
	return svc.CodeInternal
}
