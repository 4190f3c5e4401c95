package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// Defaults of the durable wakeup consumer.
const (
	// DefaultWakeupAckWait is how long a wakeup handed to the handler may
	// stay unacknowledged before JetStream redelivers it: the ack wait of
	// the durables the mesh makes for agent identities.
	DefaultWakeupAckWait = streams.WakeupAckWait
	// DefaultRetryDelay is how long a wakeup whose handler failed waits
	// before redelivery.
	DefaultRetryDelay = time.Second
)

// Wakeup is one wakeup delivered by Wakeups: the inbox's utp.Wakeup plus
// what JetStream and the headers say about it.
type Wakeup struct {
	utp.Wakeup
	// Channel is the channel of the wakeup's subject: the durables
	// Wakeups binds by default span every channel of the project.
	Channel string
	// Traceparent is the W3C trace context the wakeup carried (the
	// command's, passed through worker and inbox).
	Traceparent string
	// NumDelivered counts deliveries of this wakeup (1 for the first).
	NumDelivered uint64
}

// WakeupsOption configures Wakeups.
type WakeupsOption func(*wakeupsOptions) error

type wakeupsOptions struct {
	durable      string
	project      bool
	ackWait      time.Duration
	ackWaitSet   bool
	retryDelay   time.Duration
	skipConsumed bool
}

// WithDurable names a durable consumer of the agent's wakeups on the
// client's channel only (default: Client.DurableName(), every channel).
// Wakeups binds it when it exists with that filter and creates it
// otherwise, which takes admin rights: the mesh makes no such durable for
// an agent identity. Processes using the same name share the agent's
// wakeups, each delivered to one of them.
func WithDurable(name string) WakeupsOption {
	return func(o *wakeupsOptions) error {
		if name == "" || len(name) > 255 {
			return fmt.Errorf("%w: WithDurable: %q must be 1-255 bytes", ErrInvalid, name)
		}
		for _, r := range name {
			if r == '.' || r == '*' || r == '>' || r == ' ' || r == '/' || r == '\\' || r < 0x21 {
				return fmt.Errorf("%w: WithDurable: %q must not contain '.', '*', '>', '/', '\\' or white space", ErrInvalid, name)
			}
		}
		o.durable = name
		return nil
	}
}

// WithAckWait sets the consumer's ack wait (default DefaultWakeupAckWait): a
// handler running longer than this sees the wakeup redelivered. Changing
// the ack wait of a durable that exists takes admin rights; without the
// option Wakeups binds it with the ack wait it has.
func WithAckWait(d time.Duration) WakeupsOption {
	return func(o *wakeupsOptions) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithAckWait: %v is not a positive duration", ErrInvalid, d)
		}
		o.ackWait, o.ackWaitSet = d, true
		return nil
	}
}

// WithProjectWakeups makes Wakeups consume every agent's wakeups of the
// client's project, on the project's durable, the one the mesh makes for
// the project-wide agent identity (agent-<project>.nk:
// streams.AgentWakeupConsumer(project, ""), filtered on
// cg.<ver>.<project>.*.cmd.agent.*.wakeup): for a runtime that hosts the
// project's agents, which tells them apart by Wakeup.AgentID. Not with
// WithDurable. WithSkipConsumed then checks the client's own agent's
// wakeups only (the others' entries are on their agents' subjects).
func WithProjectWakeups() WakeupsOption {
	return func(o *wakeupsOptions) error {
		o.project = true
		return nil
	}
}

// WithRetryDelay sets how long a wakeup whose handler returned an error
// waits before redelivery (default DefaultRetryDelay).
func WithRetryDelay(d time.Duration) WakeupsOption {
	return func(o *wakeupsOptions) error {
		if d < 0 {
			return fmt.Errorf("%w: WithRetryDelay: %v is negative", ErrInvalid, d)
		}
		o.retryDelay = d
		return nil
	}
}

// WithSkipConsumed makes the consumer read the wakeup's inbox entry first
// and acknowledge, without calling the handler, wakeups whose entry is no
// longer pending (acknowledged already — by a Call, by an earlier delivery —
// or stale). It costs one inbox request per wakeup; when the inbox cannot
// be read the handler is called anyway.
func WithSkipConsumed() WakeupsOption {
	return func(o *wakeupsOptions) error {
		o.skipConsumed = true
		return nil
	}
}

// Wakeups consumes the agent's wakeups durably: a JetStream durable pull
// consumer on the wakeup stream (cg_wake_<ver>) hands each wakeup to
// handler and acknowledges it once handler returns nil. A handler error
// (or panic) makes the wakeup come back after the retry delay. Wakeups
// published while no consumer runs wait in the stream (for the stream's
// retention, 24 h) and are delivered when Wakeups runs again on the same
// durable.
//
// The durable is by default Client.DurableName(), the one the mesh makes
// for the per-agent identity agent-<project>.<agent_id>, filtered on the
// agent's wakeups in every channel of the project; WithProjectWakeups
// takes the project's (agent-<project>), WithDurable a name of the
// caller's. Wakeups binds a durable that exists (consumer info, fetch and
// ack: all an agent identity may do) and creates one that does not, which
// only admin (or a mesh without NATS authentication) may: an identity
// without rights on the durable gets no answer, and the error, matching
// ErrNoDurable, says which identity binds which durable.
//
// Delivery is at least once: the handler must be idempotent, keyed by
// (agent_turn_id, tool_call_id). A durable made for the first time
// receives every wakeup of its filter still in the stream, including those
// a Call has already consumed (see WithSkipConsumed).
//
// The handler runs on one goroutine, one wakeup at a time. The returned
// stop function (idempotent) stops fetching, waits for the running
// handler to return and gives buffered wakeups back (Nak); ending ctx stops
// the consumer too. The consumer itself stays on the server.
func (c *Client) Wakeups(ctx context.Context, handler func(Wakeup) error, opts ...WakeupsOption) (stop func() error, err error) {
	if handler == nil {
		return nil, fmt.Errorf("%w: Wakeups: nil handler", ErrInvalid)
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	o := wakeupsOptions{ackWait: DefaultWakeupAckWait, retryDelay: DefaultRetryDelay}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: Wakeups: option %d is nil", ErrInvalid, i)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.project && o.durable != "" {
		return nil, fmt.Errorf("%w: Wakeups: WithProjectWakeups and WithDurable(%q): pick one (the project's durable has its own name)", ErrInvalid, o.durable)
	}
	cons, err := c.wakeupConsumer(ctx, &o)
	if err != nil {
		return nil, err
	}
	r := &wakeupRunner{c: c, o: o, handler: handler}
	cc, err := cons.Consume(r.onMsg, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		c.log.Debug("agent: wakeup consumer", "consumer", o.durable, "err", err)
	}))
	if err != nil {
		return nil, fmt.Errorf("agent: consume wakeups with %s: %w", o.durable, err)
	}
	r.cc = cc
	stopped := make(chan struct{})
	var once sync.Once
	stop = func() error {
		once.Do(func() {
			close(stopped)
			r.stop()
		})
		return nil
	}
	go func() {
		select {
		case <-ctx.Done():
			_ = stop()
		case <-stopped:
		}
	}()
	c.log.Debug("agent: consuming wakeups", "consumer", o.durable, "stream", streams.WakeupStream(c.ver))
	return stop, nil
}

// wakeupConsumer binds the durable o names (setting o.durable to it) or,
// when it does not exist, creates it.
func (c *Client) wakeupConsumer(ctx context.Context, o *wakeupsOptions) (jetstream.Consumer, error) {
	stream := streams.WakeupStream(c.ver)
	filter, who := c.wakeSubj, "agent "+c.agentID+" in channel "+c.channel
	var err error
	switch {
	case o.project:
		o.durable, who = streams.AgentWakeupConsumer(c.project, ""), "every agent of project "+c.project
		filter, err = subjects.WakeupPattern(c.ver, c.project, "*", "*")
	case o.durable == "":
		o.durable, who = c.DurableName(), "agent "+c.agentID
		filter, err = subjects.WakeupPattern(c.ver, c.project, "*", c.agentID)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: Wakeups: %v", ErrInvalid, err)
	}
	cfg := streams.ConsumerConfig(o.durable, []string{filter}, o.ackWait, -1)
	cfg.Description = "wakeups of " + who + " (" + c.project + ")"
	// Who may bind what, for the errors.
	hint := fmt.Sprintf("an agent identity binds the durable the mesh made for it and creates none: agent-%s.%s binds %s (the default), agent-%s binds %s (WithProjectWakeups); only admin creates another",
		c.project, c.agentID, streams.AgentWakeupConsumer(c.project, c.agentID), c.project, streams.AgentWakeupConsumer(c.project, ""))
	cons, err := c.js.Consumer(ctx, stream, o.durable)
	switch {
	case err == nil:
		have := cons.CachedInfo().Config
		hf := have.FilterSubjects
		if have.FilterSubject != "" {
			hf = []string{have.FilterSubject}
		}
		if !slices.Equal(hf, []string{filter}) && !streams.Narrower(hf, []string{filter}) {
			return nil, fmt.Errorf("%w: wakeup consumer %s filters %v, not the wakeups of %s (%s): it is another agent's or project's; %s",
				ErrNoDurable, o.durable, hf, who, filter, hint)
		}
		if !o.ackWaitSet || have.AckWait == o.ackWait {
			return cons, nil
		}
		cfg.FilterSubject, cfg.FilterSubjects = "", hf
		if len(hf) == 1 {
			cfg.FilterSubject, cfg.FilterSubjects = hf[0], nil
		}
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("agent: wakeup consumer %s: stream %s does not exist (is the mesh up?): %w", o.durable, stream, err)
	case errors.Is(err, jetstream.ErrNotPullConsumer):
		return nil, fmt.Errorf("%w: wakeup consumer %s is a push consumer: delete it (nats consumer rm %s %s) or pick another name with WithDurable: %w",
			ErrNoDurable, o.durable, stream, o.durable, err)
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, fmt.Errorf("%w: wakeup consumer %s: %w (no answer is what an identity gets for a durable it may not use: %s)", ErrNoDurable, o.durable, err, hint)
	}
	cons, err = c.js.CreateOrUpdateConsumer(ctx, stream, cfg)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("agent: wakeup consumer %s: stream %s does not exist (is the mesh up?): %w", o.durable, stream, err)
		}
		return nil, fmt.Errorf("%w: wakeup consumer %s: create or update (ack wait %v): %w (%s)", ErrNoDurable, o.durable, o.ackWait, err, hint)
	}
	return cons, nil
}

// wakeupRunner runs the handler for one Wakeups consumer.
type wakeupRunner struct {
	c       *Client
	o       wakeupsOptions
	handler func(Wakeup) error
	cc      jetstream.ConsumeContext

	mu      sync.Mutex // guards stopped and the Add side of wg
	stopped bool
	wg      sync.WaitGroup
}

func (r *wakeupRunner) stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	// Drain, not Stop: the wakeups already buffered pass through onMsg,
	// which gives them back (Nak) instead of leaving them to AckWait.
	r.cc.Drain()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-r.cc.Closed():
	case <-t.C:
		r.cc.Stop()
	}
	r.wg.Wait()
}

func (r *wakeupRunner) onMsg(m jetstream.Msg) {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		_ = m.Nak() // give it back at once to the next consumer instance
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	defer r.wg.Done()

	log := r.c.log.With("consumer", r.o.durable)
	var w Wakeup
	if err := json.Unmarshal(m.Data(), &w.Wakeup); err != nil || w.AgentTurnID == "" || w.ToolCallID == "" {
		log.Warn("agent: malformed wakeup terminated", "subject", m.Subject(), "err", err, "body", string(m.Data()))
		_ = m.Term()
		return
	}
	if sub, err := subjects.Parse(m.Subject()); err == nil {
		w.Channel = sub.Channel
	}
	w.Traceparent = m.Headers().Get(utp.HeaderTraceparent)
	if md, err := m.Metadata(); err == nil {
		w.NumDelivered = md.NumDelivered
	}
	log = log.With("agent_turn_id", w.AgentTurnID, "tool_call_id", w.ToolCallID, "inbox_id", w.InboxID)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r.o.skipConsumed && w.InboxID != "" && w.AgentID == r.c.agentID {
		e, err := r.c.inbox.Get(ctx, r.c.project, w.InboxID)
		switch {
		case err == nil && e.State != inbox.StatePending:
			log.Debug("agent: wakeup of a consumed entry skipped", "state", e.State)
			_ = m.Ack()
			return
		case err != nil:
			log.Debug("agent: cannot read the wakeup's inbox entry; handing it over anyway", "err", err)
		}
	}
	if err := r.run(w); err != nil {
		log.Warn("agent: wakeup handler failed; the wakeup will be redelivered", "err", err, "delivery", w.NumDelivered)
		_ = m.NakWithDelay(r.o.retryDelay)
		return
	}
	// A plain Ack: a wakeup may be delivered again anyway (handlers are
	// idempotent, the inbox entry is the truth), so waiting for the
	// server's confirmation (DoubleAck) would buy a round trip and nothing
	// else.
	if err := m.Ack(); err != nil {
		log.Warn("agent: wakeup ack not sent; it may be delivered again", "err", err)
	}
}

// run calls the handler, turning a panic into an error.
func (r *wakeupRunner) run(w Wakeup) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return r.handler(w)
}
