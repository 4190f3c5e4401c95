package webui

import (
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/subjects"
)

// Errors of this package.
var (
	// ErrInvalid: a Config breaks a rule (no store, a bad project, no token
	// while not open). The message names the field.
	ErrInvalid = errors.New("webui: invalid config")
)

// Defaults of Config.
const (
	// DefaultPageSize is how many turns one page of the list shows.
	DefaultPageSize = 50
	// DefaultCallTimeout bounds one confirm or cancel call.
	DefaultCallTimeout = 30 * time.Second
	// DefaultReplayTimeout bounds a whole replay.
	DefaultReplayTimeout = 5 * time.Minute
)

// Config configures a Server.
type Config struct {
	// Store is the CardStore the UI reads. Required.
	Store cardstore.Store
	// Conn is the NATS connection the live feed subscribes on. Nil: no
	// live updates (the pages say so).
	Conn *nats.Conn
	// Version is the protocol version token; default subjects.DefaultVersion.
	Version string
	// Project is the project the UI shows. Required; a subject token.
	Project string
	// Agent makes the Confirm, Cancel and Replay calls; it must work in
	// Project. Nil: the UI is read-only (the pages say so).
	Agent *agent.Client
	// Mandate is the operator's mandate (the one Agent carries). A replay
	// attaches it to every re-run call instead of the recorded mandates,
	// which name the original agent. Empty: the recorded ones.
	Mandate string
	// Token is the access token. Required unless Open.
	Token string
	// Open switches the access token off: anyone who can reach the
	// listener can use the UI. The CSRF check stays on.
	Open bool
	// PageSize is how many turns one page lists; default DefaultPageSize,
	// at most cardstore.MaxPage.
	PageSize int
	// CallTimeout and ReplayTimeout bound the calls the UI makes; defaults
	// DefaultCallTimeout and DefaultReplayTimeout.
	CallTimeout   time.Duration
	ReplayTimeout time.Duration
	// Operator makes the calls of escalation decisions, as the operator
	// whose credentials the UI was started with; nil: /escalations says
	// how to start it with them.
	Operator OperatorCall
	// Escalations are the catalogues' queues of items waiting for an
	// operator (escalations.go), listed on /escalations.
	Escalations []Escalations
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Now is the clock (expiry of confirmations, bars of pending calls);
	// default time.Now.
	Now func() time.Time
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Server is the web UI: an http.Handler. Close it to stop its live feed.
type Server struct {
	cfg   Config
	log   *slog.Logger
	csrf  string
	pages map[string]*template.Template
	hub   *hub
	mux   *http.ServeMux
	h     http.Handler
}

// NewToken returns a new random access token (32 hex digits).
func NewToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it panics instead)
	return hex.EncodeToString(b)
}

// New validates cfg, subscribes the live feed (when cfg.Conn is set) and
// returns the Server.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: Store is required", ErrInvalid)
	}
	if err := card.ValidateName("project_id", cfg.Project); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if cfg.Version == "" {
		cfg.Version = subjects.DefaultVersion
	}
	if err := subjects.ValidateToken("version", cfg.Version); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if !cfg.Open && len(cfg.Token) < 16 {
		return nil, fmt.Errorf("%w: the access token must be at least 16 characters (leave it empty to get a random one, or open the UI explicitly)", ErrInvalid)
	}
	if cfg.Agent != nil && cfg.Agent.Project() != cfg.Project {
		return nil, fmt.Errorf("%w: the agent client works in project %s, the UI shows project %s", ErrInvalid, cfg.Agent.Project(), cfg.Project)
	}
	switch {
	case cfg.PageSize == 0:
		cfg.PageSize = DefaultPageSize
	case cfg.PageSize < 0 || cfg.PageSize > cardstore.MaxPage:
		return nil, fmt.Errorf("%w: page size %d: use 1 to %d", ErrInvalid, cfg.PageSize, cardstore.MaxPage)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.ReplayTimeout <= 0 {
		cfg.ReplayTimeout = DefaultReplayTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, csrf: NewToken(), pages: pages}
	if cfg.Conn != nil {
		if s.hub, err = startHub(cfg.Conn, cfg.Version, cfg.Project, cfg.Logger); err != nil {
			return nil, err
		}
	}
	s.routes()
	return s, nil
}

// Close stops the live feed and ends every open event stream. The handler
// keeps serving pages.
func (s *Server) Close() {
	if s.hub != nil {
		s.hub.close()
	}
}

// ServeHTTP serves the UI.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.h.ServeHTTP(w, r) }

func (s *Server) routes() {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.index)
	mux.HandleFunc("GET /fragments/turns", s.turnsFragment)
	mux.HandleFunc("GET /open", s.openTurn)
	mux.HandleFunc("GET /turns/{turn}", s.turnPage)
	mux.HandleFunc("GET /fragments/turns/{turn}", s.turnFragment)
	mux.HandleFunc("GET /events", s.events)
	mux.HandleFunc("POST /confirm", s.resolve(true))
	mux.HandleFunc("POST /cancel", s.resolve(false))
	mux.HandleFunc("POST /turns/{turn}/replay", s.replay)
	mux.HandleFunc("GET /escalations", s.escalations)
	mux.HandleFunc("POST /escalations/decide", s.decide)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("no page at %s %s; start from the turn list at /", r.Method, r.URL.Path))
	})
	s.mux = mux
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, http.StatusForbidden, "this request came from another site; use the UI's own buttons")
	}))
	s.h = s.guard(cop.Handler(mux))
}
