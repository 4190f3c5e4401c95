package webui

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/subjects"
)

// Event is what the live feed tells a browser: something happened in a
// turn of the project.
type Event struct {
	// Turn is the agent_turn_id.
	Turn string `json:"turn"`
	// Kind is "call" (a tool command was dispatched) or "result" (a
	// worker reported a tool.result).
	Kind string `json:"kind"`
	// ToolCallID and Tool name the call (Tool may be empty).
	ToolCallID string `json:"tool_call_id,omitempty"`
	Tool       string `json:"tool,omitempty"`
}

// clientBuffer is how many events a browser may lag behind before it is
// told to resync.
const clientBuffer = 64

// heartbeat keeps idle event streams open through proxies.
const heartbeat = 25 * time.Second

type client struct {
	ch   chan Event
	lost atomic.Bool
}

// hub fans the events of the project's commands and reports out to the
// open streams. It subscribes while a stream is open and not otherwise:
// a mesh nobody watches pays nothing for its live feed (a copy of every
// command and report would otherwise reach this connection and be
// decoded).
type hub struct {
	project string
	log     *slog.Logger
	nc      *nats.Conn // nil: no subscriptions (tests of the fan-out)
	// commands and reports are the subscribed subjects; reports are sent
	// to the inbox as requests.
	commands, reports string
	done              chan struct{}

	// subMu serializes join and leave, which subscribe and unsubscribe;
	// it is held across the subscription's flush, mu is not.
	subMu sync.Mutex
	subs  []*nats.Subscription

	mu      sync.Mutex
	clients map[*client]struct{}
	closed  bool
}

func startHub(nc *nats.Conn, version, project string, log *slog.Logger) (*hub, error) {
	commands, err := subjects.AllCommands(version)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// Workers report to the inbox with a request (svc.inbox.report) and
	// use the stream only when that is not answered: a copy of either is
	// a finished call, as is a wakeup (on a single node, where workers do
	// not report, the only one).
	reports, err := subjects.InboxReportRequestPattern(version)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return newHub(nc, project, commands, reports, log), nil
}

func newHub(nc *nats.Conn, project, commands, reports string, log *slog.Logger) *hub {
	return &hub{project: project, log: log, nc: nc, commands: commands, reports: reports,
		done: make(chan struct{}), clients: map[*client]struct{}{}}
}

// subscribe registers the hub's subscriptions on the server: every
// command published after it returns reaches onMsg.
func (h *hub) subscribe() error {
	for _, subject := range []string{h.commands, h.reports} {
		sub, err := h.nc.Subscribe(subject, h.onMsg)
		if err != nil {
			h.unsubscribe()
			return fmt.Errorf("webui: subscribe the live feed on %s: %w", subject, err)
		}
		h.subs = append(h.subs, sub)
	}
	if err := h.nc.Flush(); err != nil {
		h.unsubscribe()
		return fmt.Errorf("webui: subscribe the live feed on %s: %w", h.commands, err)
	}
	return nil
}

func (h *hub) unsubscribe() {
	for _, sub := range h.subs {
		_ = sub.Unsubscribe()
	}
	h.subs = nil
}

// onMsg turns a tool command, an inbox report (through the stream or as
// a request) or a wakeup of the project into an Event. Other commands
// (PMO internals) are not turn changes.
func (h *hub) onMsg(m *nats.Msg) {
	subj, err := subjects.Parse(m.Subject)
	if err != nil || subj.Project != h.project {
		return
	}
	var kind string
	switch {
	case subj.Component == subjects.Tool:
		kind = "call"
	case subj.Kind() == subjects.KindInboxReport,
		subj.Kind() == subjects.KindService && subj.Component == "inbox" && subj.Target == "report",
		// A single node stores the entry with the result and its worker
		// sends no report: the wakeup is then the first sign of the
		// result (a duplicate event only refreshes the turn again).
		subj.Kind() == subjects.KindAgentWakeup:
		kind = "result"
	default:
		return
	}
	var body struct {
		AgentTurnID string `json:"agent_turn_id"`
		ToolCallID  string `json:"tool_call_id"`
		ToolName    string `json:"tool_name"`
	}
	if err := json.Unmarshal(m.Data, &body); err != nil || body.AgentTurnID == "" {
		h.log.Debug("webui: live feed: a message without agent_turn_id", "subject", m.Subject)
		return
	}
	h.publish(Event{Turn: body.AgentTurnID, Kind: kind, ToolCallID: body.ToolCallID, Tool: body.ToolName})
}

func (h *hub) publish(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		select {
		case c.ch <- ev:
		default:
			c.lost.Store(true) // the stream sends "resync" instead
		}
	}
}

// join registers a stream, subscribing the hub when it is the first;
// nil when the hub is closed. When it returns, every command published
// afterwards reaches the stream.
func (h *hub) join() (*client, error) {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, nil
	}
	c := &client{ch: make(chan Event, clientBuffer)}
	h.clients[c] = struct{}{}
	h.mu.Unlock()
	if h.nc != nil && h.subs == nil {
		if err := h.subscribe(); err != nil {
			h.mu.Lock()
			delete(h.clients, c)
			h.mu.Unlock()
			return nil, err
		}
	}
	return c, nil
}

// leave removes a stream, unsubscribing the hub when it was the last.
func (h *hub) leave(c *client) {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	h.mu.Lock()
	delete(h.clients, c)
	last := len(h.clients) == 0
	h.mu.Unlock()
	if last {
		h.unsubscribe()
	}
}

func (h *hub) close() {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	close(h.done)
	h.mu.Unlock()
	h.unsubscribe()
}

// events serves the live feed as Server-Sent Events: "hello" once the
// stream is registered, then "turn" events (JSON Event) and "resync" when
// events were dropped for a slow reader.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if s.hub == nil {
		s.fail(w, r, http.StatusServiceUnavailable, "this UI has no NATS connection, so no live feed; reload the page to see changes")
		return
	}
	rc := http.NewResponseController(w)
	c, err := s.hub.join()
	if err != nil {
		s.log.Warn("webui: live feed", "err", err)
		s.fail(w, r, http.StatusServiceUnavailable, "the live feed cannot subscribe to the mesh ("+err.Error()+"); reload the page to try again")
		return
	}
	if c == nil {
		s.fail(w, r, http.StatusServiceUnavailable, "the UI is shutting down")
		return
	}
	defer s.hub.leave(c)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	send := func(event, data string) bool {
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if _, err := fmt.Fprint(w, "retry: 2000\n"); err != nil || !send("hello", `{"project":"`+s.cfg.Project+`"}`) {
		return
	}
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.hub.done:
			return
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		case ev := <-c.ch:
			if c.lost.Swap(false) && !send("resync", "{}") {
				return
			}
			b, _ := json.Marshal(ev)
			if !send("turn", string(b)) {
				return
			}
		}
	}
}
