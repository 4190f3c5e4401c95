package mcpbridge

import (
	"context"
	"errors"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

// follower keeps what the bridge gave its hosts current when a resource
// their mandates are bound to changes state (seed decision MCP-D14: state
// transitions, not a timer, trigger the Windley re-query): it subscribes
// to the resource's state events (subjects.StateEvent) the first time a
// mandate bound to it is queried, remembers the resource's state, and on
// a transition to a new state tells every host that the tool list changed
// (notifications/tools/list_changed). The next tools/list re-runs
// mandate_query with that state, so a tool the transition forbade is no
// longer advertised.
type follower struct {
	mu      sync.Mutex
	states  map[string]string       // resource id → its last state
	stops   map[string]func() error // resource id → its subscription's end
	changes int                     // transitions announced
}

// follow subscribes to resource's state events through c, once.
func (b *Bridge) follow(ctx context.Context, c *agent.Client, resource string) {
	f := &b.resources
	f.mu.Lock()
	if f.stops == nil {
		f.stops, f.states = map[string]func() error{}, map[string]string{}
	}
	if _, ok := f.stops[resource]; ok {
		f.mu.Unlock()
		return
	}
	f.stops[resource] = func() error { return nil } // taken: one subscription per resource
	f.mu.Unlock()
	stop, err := c.StateEvents(ctx, "*", resource, func(ev *utp.StateEvent) { b.transition(ev) })
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		delete(f.stops, resource) // the next query tries again
		b.log.Warn("mcp: state events of the mandate's resource not followed; its tool list refreshes only on registry changes", "resource", resource, "err", err)
		return
	}
	f.stops[resource] = stop
}

// transition records ev's new state and tells the hosts when it changed.
func (b *Bridge) transition(ev *utp.StateEvent) {
	f := &b.resources
	f.mu.Lock()
	if f.states[ev.ResourceID] == ev.NewState {
		f.mu.Unlock()
		return
	}
	f.states[ev.ResourceID] = ev.NewState
	f.changes++
	f.mu.Unlock()
	b.log.Info("mcp: resource state changed; tools/list_changed sent", "service", ev.Service, "resource", ev.ResourceID,
		"from", ev.OldState, "to", ev.NewState, "event", ev.EventID)
	b.srv.SendNotificationToAllClients(mcp.MethodNotificationToolsListChanged, nil)
}

// resourceState is the last state of resource the bridge saw, if any.
func (b *Bridge) resourceState(resource string) (string, bool) {
	b.resources.mu.Lock()
	defer b.resources.mu.Unlock()
	st, ok := b.resources.states[resource]
	return st, ok
}

// StateChanges counts the resource state transitions the bridge announced
// to its hosts (notifications/tools/list_changed).
func (b *Bridge) StateChanges() int {
	b.resources.mu.Lock()
	defer b.resources.mu.Unlock()
	return b.resources.changes
}

// stopFollowing ends every state-event subscription.
func (b *Bridge) stopFollowing() error {
	f := &b.resources
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for r, stop := range f.stops {
		errs = append(errs, stop())
		delete(f.stops, r)
	}
	return errors.Join(errs...)
}
