package webui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/confirm"
	"github.com/utpmesh/utpmesh/pkg/turn"
)

// Outcome is the data of the page shown after Confirm or Cancel.
type Outcome struct {
	Tool           string
	ConfirmationID string
	// Turn is the turn of the confirmed call (the page links back to it);
	// CallTurn the new turn the confirm or cancel tool's call ran in.
	Turn, CallTurn string
	// Status is the tool.result status; Value its result, indented.
	Status string
	Value  string
	// Resolution is OK, SKIPPED or FAILED (the result's status field).
	Resolution string
	// Error is the tool's error, or why the call could not be made.
	Error string
}

// resolve handles POST /confirm and POST /cancel: a call of the
// confirmation's confirm or cancel tool (confirm.Pending.Resolvers), as the
// UI's agent, for the form's confirmation_id. The form names the turn the
// confirmation was shown in; the tool is read from that turn, never from
// the form.
func (s *Server) resolve(yes bool) http.HandlerFunc {
	verb := "cancel"
	if yes {
		verb = "confirm"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Agent == nil {
			s.fail(w, r, http.StatusServiceUnavailable, "this UI is read-only: it was started without an agent to make calls; restart it with --mandate (the operator's mandate) to "+verb)
			return
		}
		id := strings.TrimSpace(r.PostForm.Get("confirmation_id"))
		origin := r.PostForm.Get("turn")
		switch {
		case id == "":
			s.fail(w, r, http.StatusBadRequest, "confirmation_id is missing; press "+verb+" next to a pending confirmation on a turn's page")
			return
		case len(id) > confirm.MaxIDLen:
			s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("confirmation_id is %d bytes, longer than a confirmation id (at most %d)", len(id), confirm.MaxIDLen))
			return
		case origin == "":
			s.fail(w, r, http.StatusBadRequest, "turn is missing: the form names the turn that shows confirmation "+id+"; press "+verb+" next to it on that turn's page")
			return
		}
		t, ok := s.loadTurn(w, r, origin)
		if !ok {
			return
		}
		cf := findConfirmation(t, id, s.cfg.Now())
		if cf == nil {
			s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("confirmation_id %q is not a confirmation of turn %s; press %s next to a confirmation on that turn's page", id, t.AgentTurnID, verb))
			return
		}
		tool := cf.CancelTool
		if yes {
			tool = cf.ConfirmTool
		}
		out := Outcome{Tool: tool, ConfirmationID: id, Turn: origin, CallTurn: newTurnID()}
		args, _ := confirm.Args(id)
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.CallTimeout)
		defer cancel()
		res, err := s.cfg.Agent.Call(ctx, agent.CallRequest{ToolName: tool, Arguments: args, AgentTurnID: out.CallTurn})
		status := http.StatusOK
		switch {
		case res == nil || res.Result == nil:
			if err == nil {
				err = errors.New("no result")
			}
			out.Error, status = fmt.Sprintf("%s %s could not be made: %v", tool, id, err), http.StatusBadGateway
		default:
			tr := res.Result
			out.Status, out.Value = string(tr.Status), indent(tr.Result)
			var v struct {
				Status string `json:"status"`
			}
			_ = json.Unmarshal(tr.Result, &v)
			out.Resolution = v.Status
			if tr.Status != card.StatusSuccess {
				status = http.StatusConflict
				out.Error = string(tr.Status)
				if tr.Error != nil {
					out.Error = string(tr.Error.Code) + ": " + tr.Error.Message
				}
			}
		}
		s.log.Info("webui: "+verb, "confirmation_id", id, "agent_id", s.cfg.Agent.AgentID(), "call_turn", out.CallTurn,
			"status", out.Status, "resolution", out.Resolution, "error", out.Error)
		s.render(w, r, status, "outcome", "", s.page(verb+" "+id, out))
	}
}

// findConfirmation is the confirmation id of turn t (pending or not: a
// resolved one is still sent to its tool, which says how it was used), or
// nil.
func findConfirmation(t *turn.Turn, id string, now time.Time) *Confirmation {
	resolved := transitions(t)
	for i := range t.Calls {
		if cf := confirmation(&t.Calls[i], resolved, now); cf != nil && cf.ConfirmationID == id {
			return cf
		}
	}
	return nil
}

// replay handles POST /turns/{turn}/replay: turn.Replay under a new turn
// id, then the report with each call's diff.
func (s *Server) replay(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Agent == nil {
		s.fail(w, r, http.StatusServiceUnavailable, "this UI is read-only: it was started without an agent to make calls; restart it with --mandate (the operator's mandate) to replay")
		return
	}
	t, ok := s.loadTurn(w, r, r.PathValue("turn"))
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReplayTimeout)
	defer cancel()
	rep, err := turn.Replay(ctx, s.cfg.Agent, t, turn.ReplayOptions{NewTurnID: "replay-" + card.NewID(), Mandate: s.cfg.Mandate})
	if rep == nil {
		status := http.StatusBadGateway
		if errors.Is(err, turn.ErrInvalid) || errors.Is(err, turn.ErrNotReplayable) {
			status = http.StatusBadRequest
		}
		s.fail(w, r, status, fmt.Sprintf("replay of turn %s: %v", t.AgentTurnID, err))
		return
	}
	s.log.Info("webui: replay", "turn", t.AgentTurnID, "as", rep.Plan.NewTurnID, "agent_id", rep.AgentID,
		"equal", rep.Equal, "different", rep.Different, "errors", rep.Errors)
	data := struct {
		Report *turn.Report
		Err    string
	}{Report: rep}
	if err != nil {
		data.Err = err.Error()
	}
	s.render(w, r, http.StatusOK, "replay", "", s.page("replay of "+t.AgentTurnID, data))
}
