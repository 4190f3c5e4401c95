package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/natsinbox"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/registry/natsreg"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// Sentinel errors. Every error this package returns about the request or
// its outcome matches one of them (or a context error, or an error of the
// CardStore, registry, inbox or JetStream it talked to) with errors.Is. The
// message around the sentinel names what is wrong: the field, the tool, the
// tool_call_id.
var (
	// ErrInvalid: the Config or a request breaks a rule — a project,
	// channel or agent id that is not a subject token, a missing
	// agent_turn_id, arguments that are not a JSON object, an unknown
	// after_execution, a malformed traceparent.
	ErrInvalid = errors.New("agent: invalid request")
	// ErrUnknownTool: the registry has no tool of that name in the
	// client's project. Nothing was written or published.
	ErrUnknownTool = errors.New("agent: unknown tool")
	// ErrNoResult: a wakeup (or inbox entry) points at a tool.result card
	// that cannot be read, is not a tool.result, or belongs to another call.
	ErrNoResult = errors.New("agent: no usable tool result")
	// ErrNotAcked: Call read the result but could not acknowledge the inbox
	// entry (the wakeup named none, or a Call after Close could not send
	// its ack). The Outcome is returned with the error and is valid; the
	// entry stays pending (Resume lists it as unconsumed) until
	// acknowledged. Call sends its lazy ack without waiting for the answer
	// (a failure is logged, with the same consequence).
	ErrNotAcked = errors.New("agent: inbox entry not acknowledged")
	// ErrNoDurable: Wakeups could neither bind nor create its durable
	// consumer: the identity may not use it (an agent identity binds only
	// the durable the mesh made for it), or a consumer of that name is not
	// one of this agent's wakeups. The message says which identity binds
	// which durable.
	ErrNoDurable = errors.New("agent: no usable wakeup durable")
	// ErrClosed: the Client has been closed.
	ErrClosed = errors.New("agent: client closed")
	// ErrToolFailed: CallInto's call ended with a status other than
	// success. The message names the tool, the status and the result's
	// error code and message; the Outcome is returned with it.
	ErrToolFailed = errors.New("agent: tool call did not succeed")
)

// DefaultChannel is the channel a Client uses when Config.Channel is empty,
// the same default as the CardStore, registry and inbox clients.
const DefaultChannel = svc.DefaultChannel

// DefaultPollInterval is how often a waiting Call re-reads the inbox in case
// a wakeup was lost (see Config.PollInterval).
const DefaultPollInterval = 2 * time.Second

// Config configures a Client. Project and AgentID are required.
type Config struct {
	// Project is the project (tenant) the agent works in; a subject token.
	Project string
	// Channel is the channel of the agent's subjects; a subject token,
	// default DefaultChannel.
	Channel string
	// AgentID is the agent; a subject token, since it names the wakeup
	// subject cg.<ver>.<project>.<channel>.cmd.agent.<agent_id>.wakeup.
	AgentID string
	// Version is the protocol version token; default subjects.DefaultVersion.
	Version string
	// Store is the CardStore. Default: the agent's natsstore client
	// (natsstore.NewAgentClient: the CardStore's agent-scoped subjects,
	// svc.cardstore.<op>.<agent>) on the same connection, version and
	// channel.
	Store cardstore.Store
	// Registry is the tool registry. Default: a natsreg client on the same
	// connection, version and channel.
	Registry registry.Registry
	// Inbox is the inbox. Default: the agent's inbox client
	// (natsinbox.NewAgentClient: svc.inbox.<op>.<agent>) on the same
	// connection, version and channel.
	Inbox inbox.API
	// Logger; default slog.Default().
	Logger *slog.Logger
	// PollInterval is how often a Call waiting for its result re-reads the
	// inbox, a safety net for a wakeup lost by core NATS (a reconnect, a
	// slow consumer). Default DefaultPollInterval; negative disables it.
	PollInterval time.Duration
	// Mandate is the signed mandate attached to every call that does not
	// carry its own (CallRequest.Mandate). Empty: calls carry none.
	Mandate string
	// RegistryCacheTTL (Config.RawCommands only: a dispatched call is
	// looked up by the mesh) is how long Call reuses a tool's registry entry
	// (target subject, after_execution) before reading it again. The
	// registry announces no changes, so a re-registration is seen at most
	// this much later; an unknown tool is never cached. Default
	// DefaultRegistryCacheTTL; negative reads the registry on every call.
	RegistryCacheTTL time.Duration
	// Operator makes the client an operator's (docs/security.md, "Roles"):
	// its calls are dispatched on
	// cg.<ver>.<project>.<channel>.svc.dispatch.operator.<Operator> and
	// admitted with the principal operator:<Operator> and no mandate (the
	// operator identity, operator.nk, may publish there). Their agent_id is
	// utp.OperatorAgentID(Operator), "op-<Operator>", whose wakeups are the
	// only ones that identity may receive; AgentID may be left empty or
	// must be that. Its inbox entries are read and acked on that agent
	// id's own subjects (svc.inbox.<op>.op-<Operator>), as an agent's. A
	// subject token; Mandate and RawCommands must be unset.
	Operator string
	// RawCommands makes Call and Dispatch write the tool.call card (with
	// the mandate in metadata.mandate) and publish the UTP command
	// themselves, as CommonGround-style runtimes do, instead of sending
	// one request to the mesh's admission service (svc.dispatch). Only
	// for a project whose operator opted into raw commands (utpmesh policy
	// config --commands raw) or a mesh without authorization; a gated mesh
	// refuses raw commands of other projects (docs/protocol.md,
	// "Admission").
	RawCommands bool
}

// Client is what a Go agent runtime uses to call tools over the mesh. It is
// safe for concurrent use. Close it to release its wakeup subscription.
type Client struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	ver      string
	project  string
	channel  string
	agentID  string
	store    cardstore.Store
	reg      registry.Registry
	inbox    inbox.API
	log      *slog.Logger
	poll     time.Duration
	wakeSubj string
	mandate  string
	raw      bool
	operator string // Config.Operator
	dispatch string // svc.dispatch.call.<agent> or svc.dispatch.operator.<name> subject
	entries  entryCache

	// mu guards sub, waiters and closed.
	mu      sync.Mutex
	sub     *nats.Subscription
	waiters map[string][]*waiter
	closed  bool
	done    chan struct{}

	acks ackTracker // the lazy acks of Calls, in flight (acks.go)
}

// New validates cfg and returns a Client. It creates the NATS clients of
// the CardStore, registry and inbox that cfg leaves nil; it does not talk
// to NATS yet.
func New(nc *nats.Conn, cfg Config) (*Client, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: agent.New: nil NATS connection", ErrInvalid)
	}
	if cfg.Version == "" {
		cfg.Version = subjects.DefaultVersion
	}
	if cfg.Channel == "" {
		cfg.Channel = DefaultChannel
	}
	if cfg.Operator != "" {
		if err := subjects.ValidateToken("operator", cfg.Operator); err != nil {
			return nil, fmt.Errorf("%w: agent.New: Config.Operator: %v (an operator's name, e.g. operator)", ErrInvalid, err)
		}
		want := utp.OperatorAgentID(cfg.Operator)
		switch {
		case cfg.AgentID == "":
			cfg.AgentID = want
		case cfg.AgentID != want:
			return nil, fmt.Errorf("%w: agent.New: Config.AgentID %q: an operator's calls are made as %q; leave AgentID empty", ErrInvalid, cfg.AgentID, want)
		}
		if cfg.Mandate != "" || cfg.RawCommands {
			return nil, fmt.Errorf("%w: agent.New: Config.Operator: an operator's calls carry no mandate and are dispatched by the mesh; unset Mandate and RawCommands", ErrInvalid)
		}
	}
	for _, f := range []struct{ field, role, v string }{
		{"Project", "project_id", cfg.Project},
		{"AgentID", "agent_id", cfg.AgentID},
		{"Channel", "channel_id", cfg.Channel},
		{"Version", "version", cfg.Version},
	} {
		if f.v == "" {
			return nil, fmt.Errorf("%w: agent.New: Config.%s (%s) is required", ErrInvalid, f.field, f.role)
		}
		if err := subjects.ValidateToken(f.role, f.v); err != nil {
			return nil, fmt.Errorf("%w: agent.New: Config.%s: %v (a subject token: letters, digits, '_' and '-', at most %d bytes)",
				ErrInvalid, f.field, err, subjects.MaxTokenLen)
		}
	}
	wake, err := subjects.AgentWakeup(cfg.Version, cfg.Project, cfg.Channel, cfg.AgentID)
	if err != nil {
		return nil, fmt.Errorf("%w: agent.New: wakeup subject: %v", ErrInvalid, err)
	}
	var disp subjects.ToolSubject
	if cfg.Operator != "" {
		disp, err = subjects.OperatorDispatch(cfg.Version, cfg.Project, cfg.Channel, cfg.Operator)
	} else {
		disp, err = subjects.Dispatch(cfg.Version, cfg.Project, cfg.Channel, subjects.ToolToken(cfg.AgentID))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: agent.New: dispatch subject: %v", ErrInvalid, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("agent.New: jetstream: %w", err)
	}
	// The agent's own CardStore and inbox subjects (…svc.<service>.<op>.<agent>):
	// the only ones a per-agent identity may use, served for this agent's
	// cards and entries only.
	if cfg.Store == nil {
		if cfg.Store, err = natsstore.NewAgentClient(nc, cfg.AgentID, svc.WithVersion(cfg.Version), svc.WithChannel(cfg.Channel)); err != nil {
			return nil, fmt.Errorf("agent.New: cardstore client: %w", err)
		}
	}
	if cfg.Registry == nil {
		if cfg.Registry, err = natsreg.NewClient(nc, svc.WithVersion(cfg.Version), svc.WithChannel(cfg.Channel)); err != nil {
			return nil, fmt.Errorf("agent.New: registry client: %w", err)
		}
	}
	if cfg.Inbox == nil {
		if cfg.Inbox, err = natsinbox.NewAgentClient(nc, cfg.AgentID, svc.WithVersion(cfg.Version), svc.WithChannel(cfg.Channel)); err != nil {
			return nil, fmt.Errorf("agent.New: inbox client: %w", err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.RegistryCacheTTL == 0 {
		cfg.RegistryCacheTTL = DefaultRegistryCacheTTL
	}
	return &Client{
		nc: nc, js: js, ver: cfg.Version, project: cfg.Project, channel: cfg.Channel, agentID: cfg.AgentID,
		store: cfg.Store, reg: cfg.Registry, inbox: cfg.Inbox, poll: cfg.PollInterval,
		log:      cfg.Logger.With("component", "agent", "agent_id", cfg.AgentID, "project_id", cfg.Project),
		wakeSubj: wake.String(), mandate: cfg.Mandate, raw: cfg.RawCommands, operator: cfg.Operator, dispatch: disp.String(),
		waiters: make(map[string][]*waiter),
		done:    make(chan struct{}),
		acks:    newAckTracker(),
		entries: entryCache{ttl: cfg.RegistryCacheTTL, now: time.Now},
	}, nil
}

// Project returns the client's project.
func (c *Client) Project() string { return c.project }

// Channel returns the client's channel.
func (c *Client) Channel() string { return c.channel }

// Operator returns the operator the client's calls are made as (Config.Operator), or "".
func (c *Client) Operator() string { return c.operator }

// AgentID returns the client's agent id.
func (c *Client) AgentID() string { return c.agentID }

// Version returns the client's protocol version token.
func (c *Client) Version() string { return c.ver }

// WakeupSubject returns cg.<ver>.<project>.<channel>.cmd.agent.<agent_id>.wakeup.
func (c *Client) WakeupSubject() string { return c.wakeSubj }

// DurableName returns the default name of the agent's durable wakeup
// consumer, streams.AgentWakeupConsumer(project, agent_id):
// "agent_<agent_id>_<8 hex digits>", the digits a hash of project and
// agent id, so that agents with the same id in different projects never
// share a consumer. It is the durable the mesh makes for the per-agent
// identity agent-<project>.<agent_id>, filtered on the agent's wakeups in
// every channel of the project (the wakeup stream is per version).
func (c *Client) DurableName() string {
	return streams.AgentWakeupConsumer(c.project, c.agentID)
}

// Store returns the CardStore the Client uses.
func (c *Client) Store() cardstore.Store { return c.store }

// Registry returns the tool registry the Client looks tools up in.
func (c *Client) Registry() registry.Registry { return c.reg }

// Inbox returns the inbox client.
func (c *Client) Inbox() inbox.API { return c.inbox }

// Ack acknowledges inbox entries of the client's project (inbox "ack") and
// returns how many were pending.
func (c *Client) Ack(ctx context.Context, inboxIDs ...string) (int, error) {
	n, err := c.inbox.Ack(ctx, c.project, inboxIDs...)
	if err != nil {
		return n, fmt.Errorf("agent: ack %s: %w", strings.Join(inboxIDs, ","), err)
	}
	return n, nil
}

// SetEpoch declares epoch the current epoch of the turn (inbox
// "set_epoch"): later reports of older epochs, and the turn's pending
// entries of older epochs, become stale and wake no one. It returns the
// turn's highest epoch now (epochs never go down).
func (c *Client) SetEpoch(ctx context.Context, agentTurnID string, epoch int64) (int64, error) {
	if err := checkID("agent_turn_id", agentTurnID, true); err != nil {
		return 0, err
	}
	n, err := c.inbox.SetEpoch(ctx, c.project, agentTurnID, epoch)
	if err != nil {
		return n, fmt.Errorf("agent: set_epoch of turn %s to %d: %w", agentTurnID, epoch, err)
	}
	return n, nil
}

// Close ends the Client: Calls still waiting return ErrClosed, later Calls
// and Dispatches fail with ErrClosed. It then waits (up to the inbox
// client's default timeout) for the lazy acks of finished Calls still in
// flight, so a process that exits after Close has sent them. It does not
// close the NATS connection nor stop consumers started with Wakeups (use
// their stop functions).
func (c *Client) Close() error {
	err := c.close()
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	if werr := c.waitAcks(ctx); werr != nil {
		c.log.Warn("agent: close: lazy acks still unanswered; their entries may stay pending", "err", werr)
	}
	return err
}

// close does Close's work but the wait for the lazy acks.
func (c *Client) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	close(c.done)
	if c.sub != nil {
		err := c.sub.Unsubscribe()
		c.sub = nil
		if err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
			return fmt.Errorf("agent: close: %w", err)
		}
	}
	return nil
}

// traceKey is the context key of the traceparent.
type traceKey struct{}

// ContextWithTraceparent returns a context carrying a W3C traceparent that
// Call and Dispatch put on the command (unless the request sets its own).
func ContextWithTraceparent(ctx context.Context, traceparent string) context.Context {
	return context.WithValue(ctx, traceKey{}, traceparent)
}

// TraceparentFromContext returns the traceparent set by
// ContextWithTraceparent, or "".
func TraceparentFromContext(ctx context.Context) string {
	s, _ := ctx.Value(traceKey{}).(string)
	return s
}

// checkID checks an id that travels in card metadata, the command body and
// a header: at most card.MaxIDLen bytes, no control characters.
func checkID(field, v string, required bool) error {
	if v == "" {
		if required {
			return fmt.Errorf("%w: %s is required", ErrInvalid, field)
		}
		return nil
	}
	if len(v) > card.MaxIDLen {
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalid, field, card.MaxIDLen)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			return fmt.Errorf("%w: %s %q contains a control character at byte %d", ErrInvalid, field, v, i)
		}
	}
	return nil
}

// flushTimeout bounds the flush that makes the wakeup subscription
// effective when the caller's context has no deadline.
const flushTimeout = svc.DefaultTimeout

// ensureSub creates the client's wakeup subscription, once, and makes sure
// the server has it before returning (Flush), so that any wakeup published
// afterwards reaches it.
func (c *Client) ensureSub(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if c.sub != nil {
		return nil
	}
	sub, err := c.nc.Subscribe(c.wakeSubj, c.onWakeup)
	if err != nil {
		return fmt.Errorf("agent: subscribe %s: %w", c.wakeSubj, err)
	}
	// Wakeups are small; never drop them for a slow Call.
	_ = sub.SetPendingLimits(-1, 64<<20)
	if _, ok := ctx.Deadline(); ok {
		err = c.nc.FlushWithContext(ctx)
	} else {
		err = c.nc.FlushTimeout(flushTimeout)
	}
	if err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("agent: subscribe %s: flush: %w", c.wakeSubj, err)
	}
	c.sub = sub
	c.log.Debug("agent: subscribed to wakeups", "subject", c.wakeSubj)
	return nil
}

// waiter is a Call waiting for the wakeup of one tool call.
type waiter struct {
	ch chan utp.Wakeup
}

// callKey is the waiters' key of a call of the client's project.
func callKey(turn, callID string) string { return utp.Ref("", turn, callID).Key() }

func (c *Client) register(key string) *waiter {
	w := &waiter{ch: make(chan utp.Wakeup, 1)}
	c.mu.Lock()
	c.waiters[key] = append(c.waiters[key], w)
	c.mu.Unlock()
	return w
}

func (c *Client) unregister(key string, w *waiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.waiters[key]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(c.waiters, key)
	} else {
		c.waiters[key] = ws
	}
}

// onWakeup hands a wakeup to the Calls waiting for its tool call. Wakeups
// nobody waits for (Dispatched calls, other processes of the same agent)
// are ignored here: the inbox keeps them and Wakeups consumes them durably.
func (c *Client) onWakeup(m *nats.Msg) {
	var w utp.Wakeup
	if err := json.Unmarshal(m.Data, &w); err != nil {
		c.log.Warn("agent: wakeup is not valid JSON; ignored", "subject", m.Subject, "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, wt := range c.waiters[callKey(w.AgentTurnID, w.ToolCallID)] {
		select {
		case wt.ch <- w:
		default: // a duplicate wakeup; the first is enough
		}
	}
}
