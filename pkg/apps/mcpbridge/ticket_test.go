package mcpbridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/apps/mcpbridge"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/subjects"
)

// The ticket catalogue: a test-only catalogue whose tool hands its outcome
// to an operator, the way ATP's atp_invoke_hem does (services/atp/atpmcp
// tests that one). "ticket" opens a ticket and answers WAITING at once; an
// operator approves it (ticket_approve) or rejects it (ticket_reject), and
// the catalogue then writes the outcome into the asking call's turn as the
// call "<tool_call_id>.outcome" (tool ticket_outcome), with its result card
// and report, as a catalogue that resolves calls later does. ticketHandoff
// is its mcpbridge.Handoff.
const (
	toolTicket        = "ticket"
	toolTicketApprove = "ticket_approve"
	toolTicketReject  = "ticket_reject"
	toolTicketOutcome = "ticket_outcome"

	ticketWaiting  = "WAITING"
	ticketApproved = "APPROVED"
	ticketRejected = "REJECTED"

	// outcomeSuffix ends the outcome call's tool_call_id.
	outcomeSuffix = ".outcome"
)

// The ticket catalogue's handoff, registered as the command line registers
// a catalogue's.
func init() { mcpbridge.RegisterHandoff(ticketHandoff{}) }

// tickets is the ticket catalogue's state. Conn and cards are set once the
// mesh runs (setMesh).
type tickets struct {
	mu    sync.Mutex
	nc    *nats.Conn
	cards cardstore.Store
	n     int
	open  map[string]*ticket
}

// ticket is one open or decided ticket.
type ticket struct {
	// outcome names the outcome call of the ticket's turn.
	outcome worker.ResultOf
	decided bool
}

func newTickets() *tickets { return &tickets{open: map[string]*ticket{}} }

// setMesh gives the catalogue the mesh's connection and card store.
func (tk *tickets) setMesh(nc *nats.Conn, cards cardstore.Store) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	tk.nc, tk.cards = nc, cards
}

// tools are ticket, ticket_approve and ticket_reject.
func (tk *tickets) tools() []worker.Tool {
	return []worker.Tool{
		{Name: toolTicket, Description: "Opens a ticket an operator decides; the outcome arrives as call <tool_call_id>.outcome of the turn.",
			Parameters: json.RawMessage(`{"type":"object","required":["subject"],"properties":{"subject":{"type":"string"}}}`), Handler: tk.openTicket},
		{Name: toolTicketApprove, Description: "Approves a ticket (operators).", Handler: tk.decide(true),
			Parameters: json.RawMessage(`{"type":"object","required":["ticket_id"],"properties":{"ticket_id":{"type":"string"},"note":{"type":"string"}}}`)},
		{Name: toolTicketReject, Description: "Rejects a ticket (operators).", Handler: tk.decide(false),
			Parameters: json.RawMessage(`{"type":"object","required":["ticket_id","reason"],"properties":{"ticket_id":{"type":"string"},"reason":{"type":"string"}}}`)},
	}
}

// waiting is the first result of a ticket call.
type waiting struct {
	Status        string `json:"status"`
	TicketID      string `json:"ticket_id"`
	OutcomeCallID string `json:"outcome_call_id"`
}

func (tk *tickets) openTicket(_ context.Context, call *worker.Call) (worker.Result, error) {
	var a struct {
		Subject string `json:"subject"`
	}
	if err := call.Bind(&a); err != nil {
		return worker.Result{}, err
	}
	md := call.CallCard.Metadata
	out := worker.ResultOf{Version: call.Version, ProjectID: call.ProjectID, ChannelID: call.ChannelID,
		AgentID: call.Command.AgentID, AgentTurnID: call.Command.AgentTurnID, TurnEpoch: md.TurnEpoch,
		ToolCallID: call.Command.ToolCallID + outcomeSuffix, ToolName: toolTicketOutcome, AuthorID: "ticket"}
	tk.mu.Lock()
	tk.n++
	id := fmt.Sprintf("tk_%d", tk.n)
	tk.open[id] = &ticket{outcome: out}
	tk.mu.Unlock()
	return worker.OK(waiting{Status: ticketWaiting, TicketID: id, OutcomeCallID: out.ToolCallID}), nil
}

// decision is a ticket's outcome: the result of the resolver call and of
// the outcome call.
type decision struct {
	Status   string `json:"status"`
	TicketID string `json:"ticket_id"`
	Reason   string `json:"reason,omitempty"`
	Note     string `json:"note,omitempty"`
}

// decide approves (yes) or rejects a ticket once and writes its outcome
// call into the ticket's turn.
func (tk *tickets) decide(yes bool) worker.HandlerFunc {
	return func(ctx context.Context, call *worker.Call) (worker.Result, error) {
		var a struct {
			TicketID string `json:"ticket_id"`
			Reason   string `json:"reason"`
			Note     string `json:"note"`
		}
		if err := call.Bind(&a); err != nil {
			return worker.Result{}, err
		}
		tk.mu.Lock()
		t := tk.open[a.TicketID]
		switch {
		case t == nil:
			tk.mu.Unlock()
			return worker.Result{}, worker.Fail(card.CodeBadRequest, "unknown ticket "+a.TicketID)
		case t.decided:
			tk.mu.Unlock()
			return worker.Result{}, worker.Fail(card.CodeBadRequest, "ticket "+a.TicketID+" is already decided")
		}
		t.decided = true
		nc, cards := tk.nc, tk.cards
		tk.mu.Unlock()
		d := decision{Status: ticketRejected, TicketID: a.TicketID, Reason: a.Reason}
		if yes {
			d = decision{Status: ticketApproved, TicketID: a.TicketID, Note: a.Note}
		}
		if err := writeOutcome(ctx, nc, cards, t.outcome, a.TicketID, d); err != nil {
			return worker.Result{}, worker.Fail(card.CodeUpstreamUnavailable, err.Error())
		}
		return worker.OK(d), nil
	}
}

// writeOutcome writes the outcome call of a ticket (its tool.call and
// tool.result cards) and reports the result to the inbox, which wakes the
// ticket's agent.
func writeOutcome(ctx context.Context, nc *nats.Conn, cards cardstore.Store, of worker.ResultOf, ticketID string, d decision) error {
	target, err := subjects.ToolCommand(of.Version, of.ProjectID, of.ChannelID, toolTicket)
	if err != nil {
		return err
	}
	args, _ := json.Marshal(map[string]string{"ticket_id": ticketID})
	content, _ := json.Marshal(card.ToolCallContent{ToolName: toolTicketOutcome, Arguments: args, TargetSubject: target.String()})
	callCard := &card.Card{CardID: card.NewID(), ProjectID: of.ProjectID, Type: card.TypeToolCall, AuthorID: of.AuthorID, Content: content,
		Metadata:   card.Metadata{AgentID: of.AgentID, AgentTurnID: of.AgentTurnID, TurnEpoch: of.TurnEpoch, ToolCallID: of.ToolCallID},
		ToolCallID: of.ToolCallID, CreatedAt: time.Now().UTC()}
	if err := cards.Put(ctx, callCard); err != nil && !errors.Is(err, cardstore.ErrConflict) {
		return fmt.Errorf("ticket: write the outcome call card: %w", err)
	}
	value, _ := json.Marshal(d)
	rc, err := of.Card(card.ToolResultContent{Status: card.StatusSuccess, AfterExecution: card.Suspend, Result: value}, callCard)
	if err != nil {
		return err
	}
	if rc, _, err = worker.WriteResult(ctx, cards, rc); err != nil {
		return fmt.Errorf("ticket: write the outcome result card: %w", err)
	}
	m, err := of.Report(rc)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	m.Header.Set(jetstream.MsgIDHeader, worker.ReportMsgID(rc.CardID))
	_, err = js.PublishMsg(ctx, m)
	return err
}

// ticketHandoff is the ticket catalogue's renderer in the bridge: a
// ticket call answered WAITING waits for an operator, whose answer runs
// ticket_approve (with the bridge's note) or ticket_reject (with the
// reason).
type ticketHandoff struct{}

var _ mcpbridge.Handoff = ticketHandoff{}

// Owns implements mcpbridge.Handoff.
func (ticketHandoff) Owns(tool string) bool { return tool == toolTicket }

// Pending implements mcpbridge.Handoff: a WAITING result with a ticket id.
func (ticketHandoff) Pending(result json.RawMessage) (*mcpbridge.HandoffTask, bool) {
	var w waiting
	if json.Unmarshal(result, &w) != nil || w.Status != ticketWaiting || w.TicketID == "" {
		return nil, false
	}
	return &mcpbridge.HandoffTask{ID: w.TicketID, Label: "ticket " + w.TicketID,
		Question:         fmt.Sprintf("ticket %s waits for an operator. Approve it? (false rejects it: give a reason)", w.TicketID),
		ResultToolCallID: w.OutcomeCallID, Operators: []string{toolTicketApprove, toolTicketReject}}, true
}

// Resolve implements mcpbridge.Handoff.
func (ticketHandoff) Resolve(ctx context.Context, call mcpbridge.CallFunc, id string, yes bool, reason, note string) (*agent.Outcome, error) {
	if yes {
		args, _ := json.Marshal(map[string]string{"ticket_id": id, "note": note})
		return call(ctx, toolTicketApprove, args)
	}
	args, _ := json.Marshal(map[string]string{"ticket_id": id, "reason": reason})
	return call(ctx, toolTicketReject, args)
}

// Hint implements mcpbridge.Handoff.
func (ticketHandoff) Hint(id string) string {
	return fmt.Sprintf("an operator approves it with %s {\"ticket_id\":%q} or rejects it with %s {\"ticket_id\":%q,\"reason\":…}",
		toolTicketApprove, id, toolTicketReject, id)
}
