package svc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/internal/gopool"
	"github.com/utpmesh/utpmesh/subjects"
)

// Scope is what the subject of a request says about it.
type Scope struct {
	// Version is the protocol version token.
	Version string
	// Project and Channel scope the request; handlers must stay inside Project.
	Project string
	Channel string
	// Op is the operation token (the last token of the subject).
	Op string
}

// HandlerFunc handles one request. data is the raw request body. The returned
// value is encoded as the JSON reply; a returned error becomes an error reply
// with the code the service's Codes table gives it.
type HandlerFunc func(ctx context.Context, scope Scope, data []byte) (any, error)

// Config configures a Server.
type Config struct {
	// Service is the service token in the subject, e.g. "cardstore". Required.
	Service string
	// Version is the protocol version token; default subjects.DefaultVersion.
	Version string
	// QueueGroup lets several processes share the load; default
	// "utpmesh-<service>".
	QueueGroup string
	// Codes maps the service's sentinel errors to wire codes.
	Codes Codes
	// Concurrency bounds the requests handled at once; default 64.
	Concurrency int
	// RequestTimeout bounds one handler; default 30s.
	RequestTimeout time.Duration
	// MaxRequestBytes refuses larger request bodies; default: no limit beyond
	// the connection's max payload.
	MaxRequestBytes int
	// Logger receives one line per failed request; default slog.Default().
	Logger *slog.Logger
	// Identities, when set, names the signer of a signed request by its
	// mesh identity (Unwrap); a signed request by a key it does not know
	// is refused.
	Identities Names
}

// ServerConfig is what the caller of a mesh service's NATS server
// (cardstore/natsstore, pkg/registry/natsreg) chooses; the service adds
// its name and error codes (Config).
type ServerConfig struct {
	// Version is the protocol version token; default subjects.DefaultVersion.
	Version string
	// Concurrency bounds the requests handled at once; the service's
	// default when 0 (64 unless it says otherwise).
	Concurrency int
	// RequestTimeout bounds one request; default 30s.
	RequestTimeout time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Identities, when set, names the signer of every signed write by its
	// mesh identity (the public nkeys of <data>/creds); a signed write by
	// a key it does not know is refused (forbidden). See internal/reqsign
	// and docs/security.md ("Audit"). Services without signed writes
	// ignore it.
	Identities func(pub string) (name string, ok bool)
}

// Config returns the server Config of service with c's choices.
func (c ServerConfig) Config(service string, codes Codes) Config {
	return Config{Service: service, Version: c.Version, Codes: codes, Concurrency: c.Concurrency,
		RequestTimeout: c.RequestTimeout, Logger: c.Logger, Identities: c.Identities}
}

// Server serves one service's operations on svc subjects.
type Server struct {
	nc       *nats.Conn
	cfg      Config
	handlers map[string]HandlerFunc
	tools    ToolHandlerFunc
	sem      chan struct{}
	toolSem  chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	sub      *nats.Subscription
	toolSub  *nats.Subscription
	baseCtx  context.Context
	cancel   context.CancelFunc
	// names are the identities Unwrap names signers by (Config.Identities,
	// replaced by SetIdentities).
	names atomic.Pointer[Names]
}

// NewServer returns a server for cfg.Service. Register operations with Handle,
// then call Start.
func NewServer(nc *nats.Conn, cfg Config) (*Server, error) {
	if nc == nil {
		return nil, errors.New("svc: nil NATS connection")
	}
	if cfg.Version == "" {
		cfg.Version = subjects.DefaultVersion
	}
	if err := subjects.ValidateToken("service", cfg.Service); err != nil {
		return nil, fmt.Errorf("svc: %w", err)
	}
	if err := subjects.ValidateToken("version", cfg.Version); err != nil {
		return nil, fmt.Errorf("svc: %w", err)
	}
	if cfg.QueueGroup == "" {
		cfg.QueueGroup = "utpmesh-" + cfg.Service
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 64
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		nc: nc, cfg: cfg, handlers: map[string]HandlerFunc{},
		sem: make(chan struct{}, cfg.Concurrency), toolSem: make(chan struct{}, cfg.Concurrency),
		baseCtx: ctx, cancel: cancel,
	}
	s.SetIdentities(cfg.Identities)
	return s, nil
}

// Handle registers the handler of one operation. It must be called before Start.
func (s *Server) Handle(op string, h HandlerFunc) error {
	if err := subjects.ValidateToken("op", op); err != nil {
		return fmt.Errorf("svc: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sub != nil {
		return errors.New("svc: Handle after Start")
	}
	s.handlers[op] = h
	return nil
}

// Start subscribes to cg.<ver>.*.*.svc.<service>.* in the queue group,
// and to cg.<ver>.*.*.svc.<service>.*.* when HandleTools registered a
// tool-scoped handler. The two subscriptions have a pool of Concurrency
// goroutines each.
func (s *Server) Start() error {
	pattern, err := subjects.ServicePattern(s.cfg.Version, s.cfg.Service)
	if err != nil {
		return fmt.Errorf("svc: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sub != nil {
		return errors.New("svc: already started")
	}
	sub, err := s.subscribe(pattern, s.sem, s.serve)
	if err != nil {
		return err
	}
	var toolSub *nats.Subscription
	if s.tools != nil {
		toolPattern, err := subjects.ToolServicePattern(s.cfg.Version, s.cfg.Service)
		if err == nil {
			toolSub, err = s.subscribe(toolPattern, s.toolSem, s.serveTool)
		}
		if err != nil {
			_ = sub.Unsubscribe()
			return fmt.Errorf("svc: %w", err)
		}
	}
	// Make sure the server has the subscriptions before Start returns, so a
	// request sent right after on another connection finds a responder.
	if err := s.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		if toolSub != nil {
			_ = toolSub.Unsubscribe()
		}
		return fmt.Errorf("svc: flush subscription %s: %w", pattern, err)
	}
	s.sub, s.toolSub = sub, toolSub
	return nil
}

// subscribe queue-subscribes serve to pattern, on a pool bounded by sem.
func (s *Server) subscribe(pattern string, sem chan struct{}, serve func(*nats.Msg)) (*nats.Subscription, error) {
	sub, err := s.nc.QueueSubscribe(pattern, s.cfg.QueueGroup, func(m *nats.Msg) {
		sem <- struct{}{}
		s.wg.Add(1)
		gopool.Go(func() {
			defer func() { <-sem; s.wg.Done() }()
			serve(m)
		})
	})
	if err != nil {
		return nil, fmt.Errorf("svc: subscribe %s: %w", pattern, err)
	}
	// The pool bounds concurrency; let the subscription buffer bursts.
	_ = sub.SetPendingLimits(1<<16, 256<<20)
	return sub, nil
}

// Subject returns the subject pattern the server listens on.
func (s *Server) Subject() string {
	p, _ := subjects.ServicePattern(s.cfg.Version, s.cfg.Service)
	return p
}

// Stop stops taking requests and waits, until ctx ends, for the ones in
// flight. Handlers still running when ctx ends see their context canceled;
// Stop waits CancelGrace more for them, then returns whatever is stuck.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	subs := []*nats.Subscription{s.sub, s.toolSub}
	s.mu.Unlock()
	for _, sub := range subs {
		if sub != nil && sub.IsValid() {
			_ = sub.Unsubscribe()
		}
	}
	// Wait until the server has taken the unsubscriptions in: a request
	// sent after Stop returns then finds no responder at once, instead of
	// being routed to this connection, dropped, and timing out.
	if !s.nc.IsClosed() {
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = s.nc.FlushWithContext(fctx)
		cancel()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		s.cancel()
		return nil
	case <-ctx.Done():
		s.cancel()
		grace := time.NewTimer(CancelGrace)
		defer grace.Stop()
		select {
		case <-done:
			return fmt.Errorf("svc: %s stopped with requests in flight (canceled): %w", s.cfg.Service, ctx.Err())
		case <-grace.C:
			// A handler that ignores its cancellation, or a store call
			// that never returns: do not wait for it.
			return fmt.Errorf("svc: %s stopped with requests in flight, some still running %v after their cancellation (abandoned): %w",
				s.cfg.Service, CancelGrace, ctx.Err())
		}
	}
}

// CancelGrace is how long Stop, once its deadline has canceled the
// requests in flight, waits for their handlers to return before it
// abandons them and returns.
const CancelGrace = time.Second

// serve handles one request on a plain subject.
func (s *Server) serve(m *nats.Msg) {
	start := time.Now()
	scope, h, err := s.route(m)
	var reply any
	if err == nil {
		ctx, cancel := s.requestContext(m)
		reply, err = s.call(ctx, h, scope, m.Data)
		cancel()
	}
	s.respond(m, start, reply, err)
}

// serveTool handles one request on a tool-scoped subject.
func (s *Server) serveTool(m *nats.Msg) {
	start := time.Now()
	ts, err := s.routeTool(m.Subject)
	var reply any
	if err == nil {
		ctx, cancel := s.requestContext(m)
		reply, err = s.callTool(ctx, ts, m.Data)
		cancel()
	}
	s.respond(m, start, reply, err)
}

// requestContext is the context of a handler: the request deadline, and
// the request's headers (RequestHeader).
func (s *Server) requestContext(m *nats.Msg) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(s.baseCtx, s.cfg.RequestTimeout)
	if m.Header != nil {
		ctx = context.WithValue(ctx, headerKey{}, m.Header)
	}
	return ctx, cancel
}

// respond sends the reply of a request, or its error reply.
func (s *Server) respond(m *nats.Msg, start time.Time, reply any, err error) {
	if m.Reply == "" {
		if err != nil {
			s.cfg.Logger.Warn("svc request without reply subject failed", "subject", m.Subject, "err", err)
		}
		return
	}
	if err == nil {
		body, mErr := encodeReply(reply)
		if mErr == nil {
			if rErr := m.Respond(body); rErr != nil {
				s.cfg.Logger.Warn("svc reply failed", "subject", m.Subject, "err", rErr, "bytes", len(body))
				err = fmt.Errorf("%w: reply of %d bytes could not be sent: %v", ErrTooLarge, len(body), rErr)
			} else {
				return
			}
		} else {
			err = fmt.Errorf("encode reply: %w", mErr)
		}
	}
	code, body := encodeError(s.cfg.Codes, err)
	lvl := slog.LevelDebug
	if code == CodeInternal || code == CodeUnavailable || code == CodeTimeout {
		lvl = slog.LevelWarn
	}
	s.cfg.Logger.Log(context.Background(), lvl, "svc request failed", "service", s.cfg.Service,
		"subject", m.Subject, "code", code, "err", err, "duration", time.Since(start))
	out := nats.NewMsg(m.Reply)
	out.Header.Set(headerErrorCode, code)
	out.Data = body
	_ = m.RespondMsg(out)
}

func (s *Server) route(m *nats.Msg) (Scope, HandlerFunc, error) {
	subj, err := subjects.Parse(m.Subject)
	if err != nil {
		return Scope{}, nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	scope := Scope{Version: subj.Version, Project: subj.Project, Channel: subj.Channel, Op: subj.Target}
	h, ok := s.handlers[scope.Op]
	if !ok {
		return scope, nil, fmt.Errorf("%w: service %s has no operation %q", ErrBadRequest, s.cfg.Service, scope.Op)
	}
	if s.cfg.MaxRequestBytes > 0 && len(m.Data) > s.cfg.MaxRequestBytes {
		return scope, nil, fmt.Errorf("%w: request of %d bytes exceeds the limit of %d", ErrTooLarge, len(m.Data), s.cfg.MaxRequestBytes)
	}
	return scope, h, nil
}

// call runs h; callTool runs the tool-scoped handler. A panic becomes an
// internal error so one bad request cannot take the process down.
func (s *Server) call(ctx context.Context, h HandlerFunc, scope Scope, data []byte) (reply any, err error) {
	defer s.recoverPanic(scope.Op, &err)
	return h(ctx, scope, data)
}

func (s *Server) callTool(ctx context.Context, ts subjects.ToolSubject, data []byte) (reply any, err error) {
	defer s.recoverPanic(ts.Op, &err)
	return s.tools(ctx, ts, data)
}

func (s *Server) recoverPanic(op string, err *error) {
	if r := recover(); r != nil {
		s.cfg.Logger.Error("svc handler panic", "service", s.cfg.Service, "op", op, "panic", r, "stack", string(debug.Stack()))
		*err = fmt.Errorf("internal error in %s.%s", s.cfg.Service, op)
	}
}

type headerKey struct{}

// RequestHeader returns the NATS headers of the request a handler is
// serving (traceparent and the like), or nil when it had none.
func RequestHeader(ctx context.Context) nats.Header {
	h, _ := ctx.Value(headerKey{}).(nats.Header)
	return h
}

// Decode unmarshals a request body into v, reporting malformed JSON as
// ErrBadRequest. Unknown fields are ignored.
func Decode(data []byte, v any) error { return DecodeAs(data, v, ErrBadRequest) }

// DecodeAs unmarshals a request body into v (an empty body is {}); unknown
// fields are ignored. Malformed JSON is an error wrapping sentinel, the
// service's own "bad request" sentinel, whose message is "<sentinel>:
// request body: <why>" (a sentinel made with fmt.Errorf("%w: %w", a, b)
// wraps both). An error of v's own UnmarshalJSON that wraps one of keep
// is returned as is (say, a registry.FieldError naming the field).
func DecodeAs(data []byte, v any, sentinel error, keep ...error) error {
	if len(data) == 0 {
		data = []byte("{}")
	}
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	for _, k := range keep {
		if errors.Is(err, k) {
			return err
		}
	}
	return fmt.Errorf("%w: request body: %v", sentinel, err)
}

// Encoded is a reply a handler has encoded as JSON itself (say, from a
// store's canonical bytes, without decoding them): the server sends its
// bytes as they are. The handler vouches that they are one valid JSON
// value; nothing checks them.
type Encoded []byte

// encodeReply is the body of a successful reply.
func encodeReply(reply any) ([]byte, error) {
	if e, ok := reply.(Encoded); ok {
		return e, nil
	}
	return json.Marshal(reply)
}
