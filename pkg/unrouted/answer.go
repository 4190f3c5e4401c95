package unrouted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/subjects"
)

// answer ends one command on an unrouted subject: done is false when it
// must wait (its call is claimed by someone).
func (s *Sweeper) answer(ctx context.Context, msg jetstream.Msg, sub subjects.Subject, es []*registry.Entry, st *Stats) (done bool, err error) {
	cmd, field, err := command(msg, sub)
	if errors.Is(err, errNotRoutable) {
		if err := s.deadLetter(ctx, msg, sub, field, err.Error()); err != nil {
			return false, err
		}
		st.DeadLettered++
		return true, nil
	}
	if res, err := s.cfg.Store.FindToolResult(ctx, sub.Project, cmd.AgentTurnID, cmd.ToolCallID); err == nil {
		if err := s.report(ctx, msg, sub, cmd, res); err != nil {
			return false, err
		}
		st.Answered++
		return true, nil
	} else if !errors.Is(err, cardstore.ErrNotFound) {
		return false, fmt.Errorf("unrouted: find result: %w", err)
	}
	_, err = s.cfg.Store.Claim(ctx, cardstore.ClaimRequest{ProjectID: sub.Project, Key: cardstore.CallKey{AgentTurnID: cmd.AgentTurnID, ToolCallID: cmd.ToolCallID}.String(),
		Holder: s.cfg.Holder, Lease: 30 * time.Second})
	if errors.Is(err, cardstore.ErrClaimHeld) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("unrouted: claim: %w", err)
	}
	content, err := json.Marshal(resultContent(cmd, sub, nearest(es, sub)))
	if err != nil {
		return false, err
	}
	tool := cmd.ToolName
	if tool == "" {
		tool = fullTarget(sub)
	}
	rc := &card.Card{
		CardID: card.NewID(), ProjectID: sub.Project, Type: card.TypeToolResult, AuthorID: "mesh.unrouted",
		Content: content, ToolCallID: cmd.ToolCallID, CreatedAt: time.Now().UTC(),
		Metadata: card.Metadata{AgentID: cmd.AgentID, AgentTurnID: cmd.AgentTurnID, TurnEpoch: cmd.TurnEpoch, StepID: cmd.StepID,
			ToolCallID: cmd.ToolCallID, FunctionName: tool, Role: "tool", TraceID: utp.TraceID(msg.Headers().Get(utp.HeaderTraceparent))},
	}
	err = s.cfg.Store.Put(ctx, rc)
	if errors.Is(err, cardstore.ErrResultExists) {
		rc, err = s.cfg.Store.FindToolResult(ctx, sub.Project, cmd.AgentTurnID, cmd.ToolCallID)
	}
	if err != nil {
		return false, fmt.Errorf("unrouted: write result: %w", err)
	}
	if err := s.report(ctx, msg, sub, cmd, rc); err != nil {
		return false, err
	}
	s.log.Info("unrouted: answered a command no tool serves", "subject", sub.String(), "tool_call_id", cmd.ToolCallID,
		"agent_turn_id", cmd.AgentTurnID, "tool_result_card_id", rc.CardID)
	st.Answered++
	return true, nil
}

// report sends the report of result card rc to the inbox (Config.Report;
// default: JetStream on the inbox report subject, acknowledged, as a
// worker does).
func (s *Sweeper) report(ctx context.Context, msg jetstream.Msg, sub subjects.Subject, cmd *utp.Command, rc *card.Card) error {
	tr, err := rc.ToolResult()
	if err != nil {
		return fmt.Errorf("unrouted: result card %s: %w", rc.CardID, err)
	}
	rep := utp.Report{ToolCallID: cmd.ToolCallID, AgentTurnID: cmd.AgentTurnID, TurnEpoch: cmd.TurnEpoch, AgentID: cmd.AgentID,
		ToolResultCardID: rc.CardID, Status: tr.Status, AfterExecution: tr.AfterExecution, StepID: rc.Metadata.StepID, ToolName: rc.Metadata.FunctionName}
	subj, err := subjects.InboxReport(sub.Version, sub.Project, sub.Channel)
	if err != nil {
		return err
	}
	m := nats.NewMsg(subj.String())
	m.Data, _ = json.Marshal(rep)
	for _, h := range []string{utp.HeaderTraceparent, utp.HeaderTracestate} {
		if v := msg.Headers().Get(h); v != "" {
			m.Header.Set(h, v)
		}
	}
	m.Header.Set(jetstream.MsgIDHeader, "report-"+rc.CardID)
	m.Header.Set(utp.HeaderProjectID, sub.Project)
	m.Header.Set(utp.HeaderChannelID, sub.Channel)
	m.Header.Set(utp.HeaderAgentID, cmd.AgentID)
	m.Header.Set(utp.HeaderAgentTurnID, cmd.AgentTurnID)
	m.Header.Set(utp.HeaderTurnEpoch, strconv.FormatInt(cmd.TurnEpoch, 10))
	m.Header.Set(utp.HeaderToolCallID, cmd.ToolCallID)
	if s.cfg.Report != nil {
		err = s.cfg.Report(ctx, m)
	} else {
		_, err = s.js.PublishMsg(ctx, m)
	}
	if err != nil {
		return fmt.Errorf("unrouted: report: %w", err)
	}
	return nil
}

// deadLetter publishes the dead-letter event of a command that cannot
// address a result.
func (s *Sweeper) deadLetter(ctx context.Context, msg jetstream.Msg, sub subjects.Subject, field, reason string) error {
	body := msg.Data()
	if len(body) > 4096 {
		body = body[:4096]
	}
	rec, _ := json.Marshal(worker.DeadLetter{Reason: "no tool serves " + sub.String() + " and the command cannot address a result: " + reason,
		Field: field, Subject: msg.Subject(), Body: string(body), Source: "unrouted", ReceivedAt: time.Now().UTC()})
	dl, err := subjects.DeadLetter(sub.Version, sub.Project, sub.Channel)
	if err != nil {
		return err
	}
	if _, err := s.js.Publish(ctx, dl.String(), rec); err != nil {
		return fmt.Errorf("unrouted: dead letter: %w", err)
	}
	s.log.Warn("unrouted: dead-lettered a command no tool serves", "subject", sub.String(), "field", field, "reason", reason)
	return nil
}
