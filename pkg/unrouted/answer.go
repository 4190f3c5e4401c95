package unrouted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

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
func (s *Sweeper) answer(ctx context.Context, msg *jetstream.RawStreamMsg, sub subjects.Subject, es []*registry.Entry, st *Stats) (done bool, err error) {
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
	tool := cmd.ToolName
	if tool == "" {
		tool = strings.ToValidUTF8(fullTarget(sub), "\uFFFD")
	}
	of := resultOf(msg, sub, cmd)
	of.ToolName = tool
	rc, err := of.Card(resultContent(cmd, sub, nearest(es, sub)), nil)
	if err != nil {
		return false, err
	}
	rc, _, err = worker.WriteResult(ctx, s.cfg.Store, rc)
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

// resultOf names the call of cmd for its result card and report: the
// author is the sweeper, the trace headers are the command's.
func resultOf(msg *jetstream.RawStreamMsg, sub subjects.Subject, cmd *utp.Command) worker.ResultOf {
	h := msg.Header
	return worker.ResultOf{Version: sub.Version, ProjectID: sub.Project, ChannelID: sub.Channel,
		AgentID: cmd.AgentID, AgentTurnID: cmd.AgentTurnID, TurnEpoch: cmd.TurnEpoch, ToolCallID: cmd.ToolCallID,
		StepID: cmd.StepID, AuthorID: "mesh.unrouted",
		Traceparent: h.Get(utp.HeaderTraceparent), Tracestate: h.Get(utp.HeaderTracestate), RecursionDepth: h.Get(utp.HeaderRecursionDepth)}
}

// report sends the report of result card rc to the inbox (Config.Report;
// default: JetStream on the inbox report subject, acknowledged, as a
// worker does). Its tool_name is the card's function_name.
func (s *Sweeper) report(ctx context.Context, msg *jetstream.RawStreamMsg, sub subjects.Subject, cmd *utp.Command, rc *card.Card) error {
	m, err := resultOf(msg, sub, cmd).Report(rc)
	if err != nil {
		return fmt.Errorf("unrouted: %w", err)
	}
	m.Header.Set(jetstream.MsgIDHeader, worker.ReportMsgID(rc.CardID))
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
func (s *Sweeper) deadLetter(ctx context.Context, msg *jetstream.RawStreamMsg, sub subjects.Subject, field, reason string) error {
	body := msg.Data
	if len(body) > 4096 {
		body = body[:4096]
	}
	rec, _ := json.Marshal(worker.DeadLetter{Reason: "no tool serves " + sub.String() + " and the command cannot address a result: " + reason,
		Field: field, Subject: msg.Subject, Body: string(body), Source: "unrouted", ReceivedAt: time.Now().UTC()})
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
