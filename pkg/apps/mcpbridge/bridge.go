package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz/natsauthz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/registry/natsreg"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

// Errors of the bridge.
var (
	// ErrConfig is returned by New for an incomplete or invalid Config.
	ErrConfig = errors.New("mcpbridge: bad configuration")
	// ErrNoIdentity is returned when a request carries no caller identity
	// (an HTTP request without a bearer token).
	ErrNoIdentity = errors.New("mcpbridge: no caller identity")
	// ErrTaskID is returned for a task id this bridge did not issue.
	ErrTaskID = errors.New("mcpbridge: not a task id of this bridge")
	// ErrTaskNotFound is returned for a task whose UTP call the caller
	// cannot see (no such call, or another agent's).
	ErrTaskNotFound = errors.New("mcpbridge: task not found")
	// ErrTaskTerminal is returned by tasks/cancel for a task that ended.
	ErrTaskTerminal = errors.New("mcpbridge: task already ended")
)

// DefaultCallTimeout bounds how long one tools/call waits for its UTP
// result when Config.CallTimeout is zero. The call goes on after that; the
// MCP result then says it is still pending and names it.
const DefaultCallTimeout = 5 * time.Minute

// MetadataKey is the tool.call card metadata key the bridge writes: a JSON
// object with session_id, request_id, protocol_version and client.
const MetadataKey = "mcp"

// Identity is who an MCP request calls tools as.
type Identity struct {
	// AgentID is the agent the UTP calls are made as.
	AgentID string
	// Mandate is the signed mandate (compact JWS) the calls carry; empty
	// on a mesh without the Cedar gate.
	Mandate string
	// jti is the mandate's id (set by NewIdentity).
	jti string
}

// NewIdentity returns the identity of a mandate token: its sub is the
// agent unless agentID is given. An empty token gives agentID with no
// mandate (agentID is then required).
func NewIdentity(agentID, token string) (Identity, error) {
	token = strings.TrimSpace(token)
	if token == "" {
		if agentID == "" {
			return Identity{}, fmt.Errorf("%w: no mandate and no agent id: pass a mandate (its sub is the agent) or an agent id", ErrNoIdentity)
		}
		return Identity{AgentID: agentID}, nil
	}
	m, err := mandate.Decode(token)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: the mandate is not a mandate token: %v", ErrNoIdentity, err)
	}
	if agentID == "" {
		agentID = m.Claims.Subject
	}
	return Identity{AgentID: agentID, Mandate: token, jti: m.Claims.JTI}, nil
}

type identityKey struct{}

// WithIdentity returns ctx carrying id; the bridge makes the request's
// calls as id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the identity in ctx.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// Config configures a Bridge.
type Config struct {
	// Conn is the mesh's NATS connection. Required.
	Conn *nats.Conn
	// Project is the project whose tools are served. Required.
	Project string
	// Channel is the channel calls are made on; default agent.DefaultChannel.
	Channel string
	// Version is the UTP protocol version token; default subjects.DefaultVersion.
	Version string
	// CallTimeout bounds how long a tools/call waits for its result;
	// default DefaultCallTimeout.
	CallTimeout time.Duration
	// ServerVersion is reported as the MCP server's version.
	ServerVersion string
	// Logger receives warnings; default discards.
	Logger *slog.Logger
	// Handoffs are this bridge's own handoffs, asked before the
	// registered ones (RegisterHandoff): e.g. a catalogue's handoff that
	// decides as the operator whose credentials this bridge was given.
	Handoffs []Handoff
}

// Bridge is an MCP server whose tools are a project's mesh tools.
type Bridge struct {
	cfg     Config
	log     *slog.Logger
	srv     *server.MCPServer
	reg     registry.Registry
	authz   *natsauthz.Client
	session string // the stdio session id (one per bridge)

	mu       sync.Mutex
	clients  map[string]*agent.Client
	tools    map[string]string    // tool name → fingerprint of what was served
	async    map[string]bool      // served tools that run as MCP tasks
	verified map[string]time.Time // verified bearer token → its expiry
	closed   bool

	resources follower // resources' state events (follow.go)
}

// New returns a bridge for cfg. Close it to release its agent clients.
func New(cfg Config) (*Bridge, error) {
	if cfg.Conn == nil {
		return nil, fmt.Errorf("%w: Conn is required", ErrConfig)
	}
	if cfg.Channel == "" {
		cfg.Channel = agent.DefaultChannel
	}
	if cfg.Version == "" {
		cfg.Version = subjects.DefaultVersion
	}
	if err := subjects.ValidateToken("project", cfg.Project); err != nil {
		return nil, fmt.Errorf("%w: project: %w", ErrConfig, err)
	}
	if err := subjects.ValidateToken("channel", cfg.Channel); err != nil {
		return nil, fmt.Errorf("%w: channel: %w", ErrConfig, err)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.ServerVersion == "" {
		cfg.ServerVersion = "dev"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	reg, err := natsreg.NewClient(cfg.Conn, svc.WithVersion(cfg.Version), svc.WithChannel(cfg.Channel))
	if err != nil {
		return nil, fmt.Errorf("%w: registry client: %w", ErrConfig, err)
	}
	az, err := natsauthz.NewClient(cfg.Conn, cfg.Version)
	if err != nil {
		return nil, fmt.Errorf("%w: policy client: %w", ErrConfig, err)
	}
	b := &Bridge{cfg: cfg, log: log, reg: reg, authz: az, session: card.NewID(),
		clients: map[string]*agent.Client{}, tools: map[string]string{}, async: map[string]bool{}, verified: map[string]time.Time{}}
	hooks := &server.Hooks{}
	hooks.AddBeforeListTools(func(ctx context.Context, _ any, _ *mcp.ListToolsRequest) { b.syncTools(ctx) })
	hooks.AddAfterListTools(func(ctx context.Context, _ any, _ *mcp.ListToolsRequest, res *mcp.ListToolsResult) {
		b.filterTools(ctx, res)
	})
	hooks.AddBeforeCallTool(func(ctx context.Context, id any, req *mcp.CallToolRequest) {
		b.syncTools(ctx)
		// The handler does not see the JSON-RPC id; pass it in a header
		// the bridge owns (overwriting any a client sent).
		if req.Header == nil {
			req.Header = map[string][]string{}
		} else {
			req.Header = req.Header.Clone()
		}
		req.Header.Set(requestIDHeader, fmt.Sprint(id))
	})
	b.srv = server.NewMCPServer("utpmesh", cfg.ServerVersion,
		server.WithToolCapabilities(true),
		// Announces tasks (list, cancel, tools/call); the bridge answers
		// them itself (intercept.go), so mcp-go's own task store stays empty.
		server.WithTaskCapabilities(true, true, true),
		server.WithHooks(hooks),
		server.WithRecovery(),
		server.WithInstructions("The tools of utpmesh project "+cfg.Project+". Every call is a UTP call recorded in the mesh's card store (replay it with 'utpmesh turns show TURN')."),
	)
	// Serve the registry's tools from the start, so that the first list
	// announces no change; a registry that does not answer now is read
	// again on the first list or call.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b.syncTools(ctx)
	return b, nil
}

// requestIDHeader carries the JSON-RPC request id from the hook to the
// handler (never read from the wire: the hook overwrites it).
const requestIDHeader = "X-Utpmesh-Mcp-Request-Id"

// MCPServer is the underlying MCP server (for transports).
func (b *Bridge) MCPServer() *server.MCPServer { return b.srv }

// Close closes the agent clients.
func (b *Bridge) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	var errs []error
	for _, c := range b.clients {
		errs = append(errs, c.Close())
	}
	b.clients = map[string]*agent.Client{}
	errs = append(errs, b.stopFollowing())
	return errors.Join(errs...)
}

// client returns the agent client of agentID, creating it once.
func (b *Bridge) client(agentID string) (*agent.Client, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, agent.ErrClosed
	}
	if c, ok := b.clients[agentID]; ok {
		return c, nil
	}
	c, err := agent.New(b.cfg.Conn, agent.Config{Project: b.cfg.Project, Channel: b.cfg.Channel, AgentID: agentID,
		Version: b.cfg.Version, Registry: b.reg, Logger: b.log})
	if err != nil {
		return nil, err
	}
	b.clients[agentID] = c
	return c, nil
}

// callInfo is where one MCP request stands: its identity, turn and the
// "mcp" metadata of its call cards.
type callInfo struct {
	id       Identity
	turn     string
	metadata json.RawMessage
}

// sessionOf returns the MCP session id of ctx's request ("" for a
// stateless 2026-07-28 HTTP request).
func (b *Bridge) sessionOf(ctx context.Context) string {
	s := server.ClientSessionFromContext(ctx)
	if s == nil {
		return ""
	}
	sid := s.SessionID()
	if sid == "stdio" {
		return b.session
	}
	return sid
}

// turnOf is the agent turn of ctx's MCP session: mcp-<session> (the
// session id itself when it starts with "mcp-"), or for a
// stateless caller mcp-<mandate jti> (mcp-<agent>-<bridge session> when it
// has no mandate).
func (b *Bridge) turnOf(ctx context.Context, id Identity) string {
	return b.turnFor(b.sessionOf(ctx), id)
}

// turnFor is turnOf for a session id ("" for a stateless request).
func (b *Bridge) turnFor(sid string, id Identity) string {
	if sid != "" {
		if strings.HasPrefix(sid, "mcp-") { // mcp-go's HTTP sessions: mcp-session-<uuid>
			return sid
		}
		return "mcp-" + sid
	}
	if id.jti != "" {
		return "mcp-" + id.jti
	}
	return "mcp-" + id.AgentID + "-" + b.session
}

// info resolves ctx's request: identity, turn and metadata.
func (b *Bridge) info(ctx context.Context, requestID string) (callInfo, error) {
	id, ok := IdentityFrom(ctx)
	if !ok {
		return callInfo{}, fmt.Errorf("%w: send the mandate JWT as 'Authorization: Bearer <token>'", ErrNoIdentity)
	}
	md := map[string]any{"session_id": b.sessionOf(ctx), "protocol_version": server.RequestProtocolVersion(ctx)}
	if requestID != "" {
		md["request_id"] = requestID
	}
	if pi := server.RequestProtocolInfoFromContext(ctx); pi != nil && pi.ClientInfo != nil {
		md["client"] = pi.ClientInfo.Name
	} else if s, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo); ok {
		md["client"] = s.GetClientInfo().Name
	}
	raw, _ := json.Marshal(md)
	return callInfo{id: id, turn: b.turnOf(ctx, id), metadata: raw}, nil
}
