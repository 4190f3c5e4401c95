package webui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
)

// OperatorCall makes one call as the operator whose credentials the UI
// was started with (agent.Config.Operator: the mesh dispatches it with the
// principal operator:<name>).
type OperatorCall func(ctx context.Context, tool string, args json.RawMessage) (*agent.Outcome, error)

// Escalations is a catalogue's queue of items that wait for an operator's
// decision (ATP's HEM tasks: services/atp/atpui), which the UI lists on
// /escalations with their deadline and lets the operator confirm or
// decline. The core knows no catalogue: the command line registers them
// (Config.Escalations).
type Escalations interface {
	// Kind names the queue in the UI, e.g. "HEM task".
	Kind() string
	// Pending lists the items waiting for a decision, through call.
	Pending(ctx context.Context, call OperatorCall) ([]Escalation, error)
	// Decide confirms (yes) or declines (with reason) item id through
	// call and says what happened (the decision's result names the
	// operator).
	Decide(ctx context.Context, call OperatorCall, id string, yes bool, reason string) (Decision, error)
}

// Escalation is one item waiting for an operator.
type Escalation struct {
	ID string
	// Title is a short name ("HEM-MANDATE-01 on booking …").
	Title string
	// Prompt is the confirmation prompt: what the operator decides (for a
	// mandate gap, the exact Cedar action and resource condition).
	Prompt string
	// From is who asked (an agent id).
	From     string
	Deadline time.Time
}

// Decision is what a confirmation or a decline did.
type Decision struct {
	// Status is the item's status after it (COMPLETE, DECLINED).
	Status string
	// Operator is who decided; Summary says what followed.
	Operator, Summary string
	// Result is the call's result, for the page.
	Result json.RawMessage
}

// escalationsPage is the data of /escalations.
type escalationsPage struct {
	Kind    string
	Items   []escalationRow
	Err     string
	NoCreds bool
}

type escalationRow struct {
	Escalation
	Source  int
	Overdue bool
}

// escalations handles GET /escalations: every registered queue's pending
// items, earliest deadline first.
func (s *Server) escalations(w http.ResponseWriter, r *http.Request) {
	data := escalationsPage{NoCreds: s.cfg.Operator == nil}
	var kinds []string
	for i, q := range s.cfg.Escalations {
		kinds = append(kinds, q.Kind())
		if s.cfg.Operator == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.CallTimeout)
		items, err := q.Pending(ctx, s.cfg.Operator)
		cancel()
		if err != nil {
			data.Err = fmt.Sprintf("%s: %v", q.Kind(), err)
			continue
		}
		for _, it := range items {
			data.Items = append(data.Items, escalationRow{Escalation: it, Source: i, Overdue: s.cfg.Now().After(it.Deadline)})
		}
	}
	sort.SliceStable(data.Items, func(i, j int) bool { return data.Items[i].Deadline.Before(data.Items[j].Deadline) })
	data.Kind = strings.Join(kinds, ", ")
	s.render(w, r, http.StatusOK, "escalations", "", s.page("escalations", data))
}

// decisionPage is the data of the page after a decision.
type decisionPage struct {
	ID, Verb string
	Decision Decision
	Value    string
	Error    string
}

// decide handles POST /escalations/decide: the form's item of the form's
// queue, confirmed or declined (with a reason) as the operator.
func (s *Server) decide(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Operator == nil {
		s.fail(w, r, http.StatusServiceUnavailable, "this UI has no operator credentials: restart it with --operator-creds FILE (e.g. ./utpmesh-data/creds/operator.nk) to decide escalations")
		return
	}
	id := strings.TrimSpace(r.PostForm.Get("id"))
	verb := r.PostForm.Get("decision")
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	var src int
	if _, err := fmt.Sscanf(r.PostForm.Get("source"), "%d", &src); err != nil || src < 0 || src >= len(s.cfg.Escalations) {
		s.fail(w, r, http.StatusBadRequest, "source is not one of this UI's escalation queues; use the buttons on /escalations")
		return
	}
	switch {
	case id == "":
		s.fail(w, r, http.StatusBadRequest, "id is missing; press Confirm or Decline next to an item on /escalations")
		return
	case verb != "confirm" && verb != "decline":
		s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("decision %q: want confirm or decline", verb))
		return
	case verb == "decline" && reason == "":
		s.fail(w, r, http.StatusBadRequest, "a decline needs a reason (the agent reads it); type one next to Decline")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.CallTimeout)
	defer cancel()
	d, err := s.cfg.Escalations[src].Decide(ctx, s.cfg.Operator, id, verb == "confirm", reason)
	out := decisionPage{ID: id, Verb: verb, Decision: d, Value: indent(d.Result)}
	status := http.StatusOK
	if err != nil {
		out.Error, status = err.Error(), http.StatusConflict
	}
	s.log.Info("webui: escalation "+verb, "id", id, "status", d.Status, "operator", d.Operator, "error", out.Error)
	s.render(w, r, status, "decision", "", s.page(verb+" "+id, out))
}
