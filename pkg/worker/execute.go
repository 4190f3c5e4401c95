package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// transientDelay is how long a command waits before redelivery when a
// dependency (CardStore, registry) is unavailable.
const transientDelay = 2 * time.Second

// releaseTimeout bounds giving a claim back before a retry.
const releaseTimeout = 2 * time.Second

// MissingCardDeliveries is how many deliveries of a command whose
// tool.call card is missing the runtime makes before it fails the call
// bad_request: the first ones are left for redelivery after 2 s. The
// single-node mesh publishes a new call's command beside its card's
// commit, so a command can outlive a card whose write failed (or whose
// process died before the commit); the agent, which got no answer, sends
// its dispatch again, and that writes the card.
const MissingCardDeliveries = 3

// job is one delivery of one command being handled.
type job struct {
	r       *Runtime
	tool    *Tool
	msg     jetstream.Msg
	subj    subjects.Subject
	cmd     *utp.Command
	trace   string
	deliver int
	key     string // call key for in-flight tracking
	holder  string // claim holder: this process and this execution
	claimed bool   // this execution holds the call's claim
	timeout time.Duration
	start   time.Time       // when the delivery arrived
	ctx     context.Context // carries the utp.command span (never canceled)
}

// handle runs the whole pipeline for one delivered command. Every path ends
// in exactly one of: ack after a durable report, ack/term after a
// dead-letter record, or a delayed nak for a transient failure.
func (r *Runtime) handle(t *Tool, msg jetstream.Msg) {
	j := &job{r: r, tool: t, msg: msg, deliver: 1, start: time.Now()}
	if md, err := msg.Metadata(); err == nil {
		j.deliver = int(md.NumDelivered)
	}
	if j.deliver > 1 {
		r.onRedelivered(t.Name)
	}
	j.trace = msg.Headers().Get(utp.HeaderTraceparent)
	if j.trace == "" {
		j.trace = utp.NewTraceparent()
	}
	j.ctx = r.tracer.Start(r.tracer.Extract(context.Background(), traceHeader(j.trace, msg.Headers().Get(utp.HeaderTracestate))),
		utp.SpanCommand, utp.AttrToolName, t.Name)
	defer r.tracer.End(j.ctx)
	subj, err := subjects.Parse(msg.Subject())
	if err != nil {
		r.deadLetter(msg, subjects.Subject{}, t.Name, "subject", err.Error())
		return
	}
	j.subj = subj
	cmd, err := utp.ParseCommand(msg.Data(), msg.Headers(), subj.Project, subj.Channel, t.Builtin)
	if err != nil {
		var ce *utp.CommandError
		if errors.As(err, &ce) && ce.Routable {
			c := ce.Partial
			if !c.AfterExecution.Valid() {
				c.AfterExecution = card.Suspend
			}
			j.cmd = &c
			j.refuse(err.Error())
			return
		}
		field := "(body)"
		if ce != nil {
			field = ce.Field
		}
		r.deadLetter(msg, subj, t.Name, field, err.Error())
		return
	}
	j.cmd = cmd
	j.key = utp.Ref(subj.Project, cmd.AgentTurnID, cmd.ToolCallID).Key()
	j.setSpanIDs()
	j.run()
}

// setSpanIDs names the call on the utp.command span once the command is read.
func (j *job) setSpanIDs() {
	j.r.tracer.SetAttributes(j.ctx, j.spanAttrs()...)
}

// spanAttrs are the attributes naming the call (key/value pairs), plus kv.
func (j *job) spanAttrs(kv ...string) []string {
	return append([]string{utp.AttrToolName, j.tool.Name, utp.AttrToolCallID, j.cmd.ToolCallID,
		utp.AttrAgentTurnID, j.cmd.AgentTurnID, utp.AttrProjectID, j.subj.Project}, kv...)
}

func (j *job) logAttrs() []any {
	return []any{"tool_name", j.tool.Name, "tool_call_id", j.cmd.ToolCallID,
		"agent_turn_id", j.cmd.AgentTurnID, "agent_id", j.cmd.AgentID, "project_id", j.subj.Project, "delivery", j.deliver}
}

func (j *job) run() {
	r, st := j.r, j.r.cfg.Store
	// Store calls on behalf of this tool: a remote CardStore claims and
	// writes the result on the tool's own subject (docs/security.md).
	ctx := cardstore.WithTool(r.baseCtx, j.tool.Name)
	project := j.subj.Project

	// 1. Start the call in one CardStore request: a call that already has
	// a result is answered with that result; otherwise the request claims
	// the call, so that no other live worker executes it, and returns its
	// tool.call card. (The result check and the claim are atomic.)
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	f := r.track(j.key, j.tool.Name, cancel)
	if f == nil { // another delivery of this call runs in this process
		_ = j.msg.NakWithDelay(r.cfg.ClaimLease)
		return
	}
	defer r.untrack(j.key, f)
	j.holder = fmt.Sprintf("%s/%d", r.cfg.InstanceID, r.jobSeq.Add(1))
	started, err := st.StartCall(ctx, cardstore.StartCallRequest{
		ProjectID: project, AgentTurnID: j.cmd.AgentTurnID, ToolCallID: j.cmd.ToolCallID,
		ToolCallCardID: j.cmd.ToolCallCardID, Holder: j.holder, Lease: r.cfg.ClaimLease,
	})
	var held *cardstore.ClaimHeldError
	switch {
	case err == nil && started.Result != nil:
		r.log.Debug("duplicate command: re-reporting the existing result", append(j.logAttrs(), "tool_result_card_id", started.Result.CardID)...)
		j.reportExisting(started.Result)
		return
	case errors.As(err, &held):
		wait := time.Until(held.ExpiresAt) + 250*time.Millisecond
		if wait < 500*time.Millisecond {
			wait = 500 * time.Millisecond
		}
		r.log.Debug("call is being executed by another worker", append(j.logAttrs(), "holder", held.Holder)...)
		_ = j.msg.NakWithDelay(wait)
		return
	case errors.Is(err, cardstore.ErrForbidden):
		// A remote CardStore refuses this tool's claim: the call is
		// another tool's (its tool.call card says so), so there is no
		// result this worker may write. Retrying cannot help.
		r.deadLetter(j.msg, j.subj, j.tool.Name, "tool_call_card_id", err.Error())
		return
	case err != nil:
		j.retryLater("start call", err)
		return
	case started.Claim == nil:
		j.retryLater("start call", errors.New("the CardStore answered start_call with neither a result nor a claim"))
		return
	}
	claim := started.Claim
	j.claimed = true
	if claim.TakenOver {
		r.onTakeover(j.tool.Name)
		r.log.Warn("took over the claim of a worker that stopped renewing it", append(j.logAttrs(), "previous_holder", claim.PreviousHolder, "token", claim.Token)...)
		// 2. Poison commands: the claim's token grows only when a worker
		// died (or stalled) while executing the call. Store outages and
		// "claim held" retries do not count.
		if max := j.maxDeliveries(); claim.Token > uint64(max) {
			r.onPoisoned(j.tool.Name)
			j.fail(card.StatusFailed, card.CodeInternalError,
				fmt.Sprintf("gave up after %d executions that did not finish: the tool may crash its worker", claim.Token-1), nil, nil)
			return
		}
		if j.cancelRecorded(ctx) {
			cancel(errCanceledByRequest)
		}
	}
	if r.wasCanceled(j.key) {
		cancel(errCanceledByRequest)
	}

	// 3. Check the tool.call card and read the registry entry.
	callCard := started.CallCard
	if callCard == nil {
		missing := fmt.Sprintf("tool_call_card_id %s: no such card in project %s (write the tool.call card before publishing the command)", j.cmd.ToolCallCardID, project)
		if j.deliver < MissingCardDeliveries {
			// The card may come yet (the agent's resent dispatch writes
			// it): give the claim back, so the redelivery neither waits
			// for it nor counts as a take-over, and retry.
			j.retryLater("tool.call card", fmt.Errorf("%s; delivery %d of %d before the call fails", missing, j.deliver, MissingCardDeliveries))
			return
		}
		j.fail(card.StatusFailed, card.CodeBadRequest, missing, nil, nil)
		return
	}
	call, failMsg := j.checkCallCard(callCard)
	if failMsg != "" {
		j.fail(card.StatusFailed, card.CodeBadRequest, failMsg, nil, callCard)
		return
	}
	ent, err := r.entries.get(ctx, r.cfg.Registry, j.tool, project)
	if errors.Is(err, registry.ErrNotFound) {
		j.fail(card.StatusFailed, card.CodeBadRequest,
			fmt.Sprintf("tool %s is not registered in project %s (register it: utpmesh tools import, or start the worker with this project)", j.tool.Name, project), nil, callCard)
		return
	} else if errors.Is(err, registry.ErrInvalid) {
		j.fail(card.StatusFailed, card.CodeInternalError,
			fmt.Sprintf("the registry entry of %s in project %s is unusable: %v", j.tool.Name, project, err), nil, callCard)
		return
	} else if err != nil {
		j.retryLater("registry lookup", err)
		return
	}
	args, err := registry.ApplyArgs(ent.entry.Options, call.Arguments)
	if err == nil {
		err = ent.schema.Validate(args)
	}
	if err != nil {
		j.fail(card.StatusFailed, card.CodeBadRequest, err.Error(), nil, callCard)
		return
	}

	// 4. Execute under the tool's timeout, keeping the message and claim alive.
	c := &Call{
		Version: j.subj.Version, ProjectID: project, ChannelID: j.subj.Channel, ToolName: j.tool.Name, Command: *j.cmd,
		CallCard: callCard, Arguments: args, Entry: ent.entry, Traceparent: j.trace, Delivery: j.deliver,
		Builtin: j.tool.Builtin,
	}
	if !j.authorize(ctx, c, callCard) {
		return
	}
	j.timeout = ent.entry.Options.Timeout()
	if cause := context.Cause(callCtx); cause != nil {
		// Canceled before the handler started (a cancel request, or the
		// drain deadline passed): end the call without running it.
		r.log.Debug("call canceled before it started", append(j.logAttrs(), "cause", cause)...)
		j.finish(Result{}, cause, cause, callCard)
		return
	}
	execCtx, cancelTimeout := context.WithTimeoutCause(callCtx, j.timeout, context.DeadlineExceeded)
	execCtx = r.tracer.Start(spanValues{Context: execCtx, spans: j.ctx}, utp.SpanExecute, j.spanAttrs()...)
	stopKeepalive := j.keepalive(ctx, cancel)
	start := time.Now()
	r.log.Debug("executing", append(j.logAttrs(), "claim_token", claim.Token)...)
	r.onExecuteStart(j.tool.Name)
	res, herr := j.invoke(execCtx, c)
	d := time.Since(start)
	r.onExecuteEnd(j.tool.Name, d)
	stopKeepalive()
	cause := context.Cause(execCtx)
	cancelTimeout()
	if herr != nil {
		r.tracer.SetError(execCtx, herr)
	}
	r.tracer.End(execCtx)
	r.log.Debug("tool executed", append(j.logAttrs(), "duration", d, "err", herr)...)
	j.finish(res, herr, cause, callCard)
}

// checkCallCard verifies that the card the command points at is the
// tool.call of this call and this tool.
func (j *job) checkCallCard(c *card.Card) (*card.ToolCallContent, string) {
	if c.Type != card.TypeToolCall {
		return nil, fmt.Sprintf("tool_call_card_id %s is a %q card, not a tool.call card", c.CardID, c.Type)
	}
	if c.Metadata.AgentTurnID != j.cmd.AgentTurnID {
		return nil, fmt.Sprintf("tool.call card %s belongs to turn %q, not %q", c.CardID, c.Metadata.AgentTurnID, j.cmd.AgentTurnID)
	}
	if c.ToolCallID != j.cmd.ToolCallID {
		return nil, fmt.Sprintf("tool.call card %s belongs to tool_call_id %q, not %q", c.CardID, c.ToolCallID, j.cmd.ToolCallID)
	}
	call, err := c.ToolCall()
	if err != nil {
		return nil, fmt.Sprintf("tool.call card %s: %v", c.CardID, err)
	}
	if call.ToolName != j.tool.Name {
		return nil, fmt.Sprintf("tool.call card %s calls tool %q, but the command was sent to %q", c.CardID, call.ToolName, j.tool.Name)
	}
	if j.cmd.ToolName != "" && j.cmd.ToolName != j.tool.Name {
		return nil, fmt.Sprintf("tool_name %q does not match the tool %q served on this subject", j.cmd.ToolName, j.tool.Name)
	}
	return call, ""
}

// invoke runs the handler, turning a panic into an internal error.
func (j *job) invoke(ctx context.Context, c *Call) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			j.r.log.Error("tool panicked", append(j.logAttrs(), "panic", p, "stack", string(debug.Stack()))...)
			err = Fail(card.CodeInternalError, fmt.Sprintf("tool %s panicked: %v", j.tool.Name, p))
		}
	}()
	return j.tool.Handler(ctx, c)
}

// finish maps the handler's outcome to a tool.result card and reports it.
func (j *job) finish(res Result, herr error, cause error, callCard *card.Card) {
	if errors.Is(cause, errClaimLost) {
		// The call is the new holder's: its result is the call's one
		// result. Writing one here — a failure, or what a handler that
		// ignored the cancel returned — would race it (and win on a local
		// CardStore, which does not fence Put; a remote one refuses it,
		// claim_lost). Leave the command for redelivery, which finds the
		// claim held, then the new holder's result.
		j.claimed = false
		j.r.log.Warn("this execution lost its claim (it could not renew it in time); another worker owns the call now",
			append(j.logAttrs(), "holder", j.holder, "handler_err", herr)...)
		_ = j.msg.NakWithDelay(transientDelay)
		return
	}
	if errors.Is(herr, ErrRetryLater) {
		j.retryLater("handler", herr)
		return
	}
	if herr == nil && errors.Is(cause, context.DeadlineExceeded) {
		herr = cause // the handler ignored its deadline: the call timed out
	}
	if herr != nil {
		var ce *card.Error
		switch {
		case errors.Is(cause, errCanceledByRequest):
			j.fail(card.StatusCanceled, card.CodeCanceled, "the call was canceled by cancel_tool_call", nil, callCard)
		case errors.Is(cause, errShutdown):
			j.fail(card.StatusCanceled, card.CodeCanceled, "the worker shut down before the call finished", nil, callCard)
		case errors.Is(cause, context.DeadlineExceeded):
			j.fail(card.StatusTimeout, card.CodeToolTimeout, fmt.Sprintf("tool %s did not finish within its timeout of %v", j.tool.Name, j.timeout), nil, callCard)
		case errors.As(herr, &ce):
			j.fail(card.StatusFailed, ce.Code, ce.Message, ce.Detail, callCard)
		default:
			j.fail(card.StatusFailed, card.CodeInternalError, herr.Error(), nil, callCard)
		}
		return
	}
	status := res.Status
	if status == "" {
		status = card.StatusSuccess
	}
	if status != card.StatusSuccess && status != card.StatusPartial {
		j.fail(card.StatusFailed, card.CodeInternalError, fmt.Sprintf("tool %s returned status %q without an error; handlers return an error to fail", j.tool.Name, status), nil, callCard)
		return
	}
	val, err := json.Marshal(res.Value)
	if err != nil {
		j.fail(card.StatusFailed, card.CodeInternalError, "the tool's result could not be encoded as JSON: "+err.Error(), nil, callCard)
		return
	}
	content := card.ToolResultContent{
		Status:         status,
		AfterExecution: card.EffectiveAfterExecution(val, j.cmd.AfterExecution),
		Result:         val,
	}
	j.complete(content, callCard)
}

// fail ends the call with a non-success status.
func (j *job) fail(status card.Status, code card.ErrorCode, msg string, detail json.RawMessage, callCard *card.Card) {
	if j.cmd != nil {
		j.r.log.Info("tool call failed", append(j.logAttrs(), "status", status, "code", code, "error", msg)...)
	}
	j.complete(card.NewResultContent(status, j.cmd.AfterExecution, code, msg, detail), callCard)
}

// refuse ends a malformed but routable command with a failed bad_request
// result, unless the call already has a result (re-reported) or a live
// worker is running it (the malformed copy must not win the one result).
func (j *job) refuse(msg string) {
	st, ctx := j.r.cfg.Store, cardstore.WithTool(j.r.baseCtx, j.tool.Name)
	key := utp.Ref(j.subj.Project, j.cmd.AgentTurnID, j.cmd.ToolCallID).Key()
	if j.r.running(key) {
		_ = j.msg.NakWithDelay(j.r.cfg.ClaimLease)
		return
	}
	// The command's tool_call_card_id may be what is malformed: read no card.
	j.holder = fmt.Sprintf("%s/%d", j.r.cfg.InstanceID, j.r.jobSeq.Add(1))
	started, err := st.StartCall(ctx, cardstore.StartCallRequest{
		ProjectID: j.subj.Project, AgentTurnID: j.cmd.AgentTurnID, ToolCallID: j.cmd.ToolCallID,
		Holder: j.holder, Lease: j.r.cfg.ClaimLease,
	})
	switch {
	case err == nil && started.Result != nil:
		j.reportExisting(started.Result)
		return
	case errors.Is(err, cardstore.ErrClaimHeld):
		_ = j.msg.NakWithDelay(j.r.cfg.ClaimLease)
		return
	case errors.Is(err, cardstore.ErrForbidden):
		j.r.deadLetter(j.msg, j.subj, j.tool.Name, "tool_call_card_id", err.Error())
		return
	case err != nil:
		j.retryLater("start call", err)
		return
	}
	// This execution holds the claim now: a transient failure writing the
	// result gives it back (retryLater), so the next delivery neither
	// waits out the lease nor counts as a take-over.
	j.claimed = true
	j.fail(card.StatusFailed, card.CodeBadRequest, msg, nil, nil)
}

// retryLater leaves the command for a later delivery: a dependency is
// unavailable, which is no reason to fail the call.
//
// A claim this execution took is given back first: the call did not run,
// so the redelivery must neither wait out the lease nor count as a take-over
// of a dead execution (which feeds the poison limit).
func (j *job) retryLater(what string, err error) {
	j.r.log.Warn("transient failure; the command will be redelivered", append(j.logAttrs(), "step", what, "err", err)...)
	if j.claimed {
		ctx, cancel := context.WithTimeout(cardstore.WithTool(j.r.baseCtx, j.tool.Name), releaseTimeout)
		rerr := j.r.cfg.Store.Release(ctx, j.subj.Project, cardstore.CallKey{AgentTurnID: j.cmd.AgentTurnID, ToolCallID: j.cmd.ToolCallID}.String(), j.holder)
		cancel()
		if rerr != nil {
			// The lease then lapses on its own; the redelivery waits for it.
			j.r.log.Debug("cannot release the claim before a retry", append(j.logAttrs(), "err", rerr)...)
		} else {
			j.claimed = false
		}
	}
	_ = j.msg.NakWithDelay(transientDelay)
}

// maxDeliveries is the poison limit: the registry entry's
// options.max_deliveries, else the tool's, else the runtime's.
func (j *job) maxDeliveries() int {
	if e, err := j.r.entries.get(j.r.baseCtx, j.r.cfg.Registry, j.tool, j.subj.Project); err == nil && e.entry.Options.MaxDeliveries > 0 {
		return e.entry.Options.MaxDeliveries
	}
	if m := j.tool.Options.MaxDeliveries; m > 0 {
		return m
	}
	return j.r.cfg.MaxDeliveries
}

// keepalive extends the message's ack deadline and renews the claim while
// the handler runs. A renewal that finds the claim taken cancels the call.
func (j *job) keepalive(ctx context.Context, cancel context.CancelCauseFunc) (stop func()) {
	every := min(j.r.cfg.AckWait, j.r.cfg.ClaimLease) / 3
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				_ = j.msg.InProgress()
				_, err := j.r.cfg.Store.Claim(ctx, cardstore.ClaimRequest{
					ProjectID: j.subj.Project, Key: cardstore.CallKey{AgentTurnID: j.cmd.AgentTurnID, ToolCallID: j.cmd.ToolCallID}.String(),
					Holder: j.holder, Lease: j.r.cfg.ClaimLease,
				})
				if errors.Is(err, cardstore.ErrClaimHeld) {
					cancel(errClaimLost)
					return
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

// errClaimLost is the cancel cause when another worker took the claim over.
var errClaimLost = errors.New("claim lost")
