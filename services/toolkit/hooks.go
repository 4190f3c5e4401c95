package toolkit

import (
	"context"
	"time"

	"github.com/utpmesh/utpmesh/pkg/worker"
)

// Guard checks a call before its handler runs; a non-nil error ends the
// call with it (a *card.Error keeps its code). Rate limits, a catalogue's
// own domain policy and operator-only checks are guards.
type Guard func(ctx context.Context, spec *Spec, call *worker.Call) error

// Outcome is what the audit hook sees of one call.
type Outcome struct {
	// Spec is the tool's spec.
	Spec *Spec
	// Call is the call.
	Call *worker.Call
	// Result and Err are what the call returned (guards included).
	Result worker.Result
	Err    error
	// Start is when the toolkit took the call; Duration how long it ran.
	Start    time.Time
	Duration time.Duration
	// Detail is what the handler attached with Annotate (the catalogue's
	// own audit record), or nil.
	Detail any
}

type outcomeKey struct{}

// Annotate attaches a catalogue's own audit detail to the call running
// under ctx (a handler behind Hooks); the audit hook finds it in
// Outcome.Detail. Outside a toolkit handler it does nothing.
func Annotate(ctx context.Context, detail any) {
	if o, ok := ctx.Value(outcomeKey{}).(*Outcome); ok {
		o.Detail = detail
	}
}

// AuditFunc records one call's outcome. It cannot change the outcome: a
// record that cannot be stored is the hook's to log.
type AuditFunc func(ctx context.Context, o *Outcome)

// Hooks are what a catalogue fills around every tool it builds.
type Hooks struct {
	// Guards run in order before the handler; the first error ends the
	// call.
	Guards []Guard
	// Audit, when set, sees every call's outcome.
	Audit AuditFunc
	// Now is the audit clock; default time.Now.
	Now func() time.Time
}

// Wrap returns the worker handler of a spec: the guards, then run, then
// the audit hook.
func (h Hooks) Wrap(spec *Spec, run Handler) worker.HandlerFunc {
	now := h.Now
	if now == nil {
		now = time.Now
	}
	guards := append([]Guard(nil), h.Guards...)
	audit := h.Audit
	return func(ctx context.Context, call *worker.Call) (worker.Result, error) {
		o := &Outcome{Spec: spec, Call: call, Start: now()}
		if audit != nil {
			ctx = context.WithValue(ctx, outcomeKey{}, o)
		}
		var res worker.Result
		var err error
		for _, g := range guards {
			if err = g(ctx, spec, call); err != nil {
				break
			}
		}
		if err == nil {
			res, err = run(ctx, call)
		}
		if audit != nil {
			o.Result, o.Err, o.Duration = res, err, now().Sub(o.Start)
			audit(ctx, o)
		}
		return res, err
	}
}

// Value is a Handler of a function returning a plain value: worker.OK of
// the value, or the value itself when it is a worker.Result (a partial
// result).
func Value(run func(ctx context.Context, call *worker.Call) (any, error)) Handler {
	return func(ctx context.Context, call *worker.Call) (worker.Result, error) {
		v, err := run(ctx, call)
		if err != nil {
			return worker.Result{}, err
		}
		if r, ok := v.(worker.Result); ok {
			return r, nil
		}
		return worker.OK(v), nil
	}
}
