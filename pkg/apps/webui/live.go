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

// hub fans the events of one NATS subscription out to the open streams.
type hub struct {
	project string
	log     *slog.Logger
	sub     *nats.Subscription
	reports *nats.Subscription // reports sent to the inbox as requests
	done    chan struct{}

	mu      sync.Mutex
	clients map[*client]struct{}
	closed  bool
}

func startHub(nc *nats.Conn, version, project string, log *slog.Logger) (*hub, error) {
	pattern, err := subjects.AllCommands(version)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	h := &hub{project: project, log: log, done: make(chan struct{}), clients: map[*client]struct{}{}}
	h.sub, err = nc.Subscribe(pattern, h.onMsg)
	if err != nil {
		return nil, fmt.Errorf("webui: subscribe the live feed on %s: %w", pattern, err)
	}
	// Workers report to the inbox with a request (svc.inbox.report) and
	// use the stream only when that is not answered: a copy of either is
	// a finished call, as is a wakeup (on a single node, where workers do
	// not report, the only one).
	reports, err := subjects.InboxReportRequestPattern(version)
	if err == nil {
		h.reports, err = nc.Subscribe(reports, h.onMsg)
	}
	if err != nil {
		_ = h.sub.Unsubscribe()
		return nil, fmt.Errorf("webui: subscribe the live feed on %s: %w", reports, err)
	}
	// The subscription is registered on the server before New returns, so
	// no command published afterwards is missed.
	if err := nc.Flush(); err != nil {
		_ = h.sub.Unsubscribe()
		_ = h.reports.Unsubscribe()
		return nil, fmt.Errorf("webui: subscribe the live feed on %s: %w", pattern, err)
	}
	return h, nil
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

// join registers a stream; nil when the hub is closed.
func (h *hub) join() *client {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	c := &client{ch: make(chan Event, clientBuffer)}
	h.clients[c] = struct{}{}
	return c
}

func (h *hub) leave(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.clients, c)
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	_ = h.sub.Unsubscribe()
	_ = h.reports.Unsubscribe()
	close(h.done)
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
	c := s.hub.join()
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
