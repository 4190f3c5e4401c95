package svc

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/subjects"
)

// DefaultTimeout applies to a Call whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// Call sends req (encoded as JSON) on subject and decodes the reply into
// resp (which may be nil). An error reply is returned as a *RemoteError that
// matches the sentinel its code maps to in codes.
func Call(ctx context.Context, nc *nats.Conn, subject string, codes Codes, req, resp any) error {
	m, err := requestMsg(subject, req)
	if err != nil {
		return err
	}
	return CallMsg(ctx, nc, m, codes, resp)
}

// requestMsg encodes req (as JSON) into a request on subject.
func requestMsg(subject string, req any) (*nats.Msg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%w: encode request: %v", ErrBadRequest, err)
	}
	m := nats.NewMsg(subject)
	m.Data = body
	return m, nil
}

// CallMsg is Call for a request already encoded into m (with headers, say:
// a traceparent). Call and CallMsg send the request once; an Endpoint
// resends the requests of the ops its service declares may be repeated
// (Ops).
func CallMsg(ctx context.Context, nc *nats.Conn, m *nats.Msg, codes Codes, resp any) error {
	return callMsg(ctx, nc, m, codes, resp, 0)
}

// CallResent is Call for a request its service applies at most once
// however many copies arrive (a Deduped op: the admission's dispatch,
// keyed by its tool_call_id): the request is sent again every
// DefaultAttempt while no reply to any copy has come, so a request the
// answering process took with it when it died costs an attempt, not the
// whole deadline.
func CallResent(ctx context.Context, nc *nats.Conn, subject string, codes Codes, req, resp any) error {
	m, err := requestMsg(subject, req)
	if err != nil {
		return err
	}
	return callMsg(ctx, nc, m, codes, resp, DefaultAttempt)
}

// callMsg is CallMsg; with attempt > 0 the request is resent every
// attempt until a reply to any copy arrives (requestAttempts).
func callMsg(ctx context.Context, nc *nats.Conn, m *nats.Msg, codes Codes, resp any, attempt time.Duration) error {
	subject, body := m.Subject, m.Data
	if max := nc.MaxPayload(); max > 0 && int64(len(body)) > max {
		return fmt.Errorf("%w: request of %d bytes exceeds the NATS max payload of %d bytes", ErrTooLarge, len(body), max)
	}
	ctx, cancel := deadline.Bound(ctx, DefaultTimeout)
	defer cancel()
	msg, err := requestAttempts(ctx, nc, m, attempt)
	if err != nil {
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return fmt.Errorf("%w: nothing serves %s (is the mesh running: utpmesh up?)", ErrUnavailable, subject)
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
			return fmt.Errorf("%w: no reply on %s: %v", ErrTimeout, subject, err)
		case errors.Is(err, context.Canceled):
			return err
		case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining):
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return fmt.Errorf("request %s: %w", subject, err)
	}
	if code := msg.Header.Get(headerErrorCode); code != "" || bytes.HasPrefix(bytes.TrimSpace(msg.Data), []byte(`{"error"`)) {
		var er errorReply
		if err := json.Unmarshal(msg.Data, &er); err != nil || er.Error == nil {
			return fmt.Errorf("%w: error reply on %s: %q", ErrBadReply, subject, truncate(msg.Data))
		}
		return &RemoteError{Subject: subject, Code: er.Error.Code, Message: er.Error.Message, Detail: er.Error.Detail, sentinel: codes.sentinel(er.Error.Code)}
	}
	if resp == nil {
		return nil
	}
	if d, ok := resp.(ReplyDecoder); ok {
		err = d.DecodeReply(msg.Data)
	} else {
		err = json.Unmarshal(msg.Data, resp)
	}
	if err != nil {
		return fmt.Errorf("%w: reply on %s: %v", ErrBadReply, subject, err)
	}
	return nil
}

// ReplyDecoder is a reply value that decodes a successful reply's body
// itself instead of through json.Unmarshal (which first scans the whole
// body once to validate it, then again to decode). DecodeReply must
// refuse invalid JSON as json.Unmarshal would.
type ReplyDecoder interface {
	DecodeReply(data []byte) error
}

// Subject builds the svc subject of one operation.
func Subject(ver, project, channel, service, op string) (string, error) {
	s, err := subjects.Service(ver, project, channel, service, op)
	if err != nil {
		return "", err
	}
	return s.String(), nil
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// Endpoint is where a service client sends its requests: the protocol
// version and channel of the svc subjects, the timeout of a request
// whose context has no deadline, and which ops' requests are resent every
// Attempt while unanswered (Ops; see resend.go). The NATS clients of the
// CardStore, the registry and the inbox share it.
type Endpoint struct {
	NC      *nats.Conn
	Service string
	Codes   Codes
	Version string
	Channel string
	Timeout time.Duration
	// Ops declares which of the service's ops may be resent (Read,
	// Deduped); the others, and every op when Ops is nil, are sent once.
	Ops Ops
	// Attempt is how long a resendable request waits for a reply before
	// a copy is sent (DefaultAttempt; WithAttempt).
	Attempt time.Duration
}

// NewEndpoint returns an Endpoint for service with the defaults:
// subjects.DefaultVersion, channel "default", DefaultTimeout,
// DefaultAttempt, no op resent.
func NewEndpoint(nc *nats.Conn, service string, codes Codes) Endpoint {
	return Endpoint{NC: nc, Service: service, Codes: codes, Version: subjects.DefaultVersion, Channel: "default", Timeout: DefaultTimeout, Attempt: DefaultAttempt}
}

// attempt is the resend interval of op's requests, 0 when op is sent
// once.
func (e Endpoint) attempt(op string) time.Duration {
	if !e.Ops.resends(op) {
		return 0
	}
	return cmp.Or(e.Attempt, DefaultAttempt)
}

// Call sends one request on cg.<ver>.<project>.<channel>.svc.<service>.<op>.
// A project that is not a valid subject token fails with ErrBadRequest
// before anything is sent.
func (e Endpoint) Call(ctx context.Context, project, op string, req, resp any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	subj, err := subjects.Service(e.Version, project, e.Channel, e.Service, op)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	ctx, cancel := deadline.Bound(ctx, e.Timeout)
	defer cancel()
	return e.call(ctx, subj.String(), op, req, resp)
}

// call is Call for the request of op, resent when op may be (attempt).
func (e Endpoint) call(ctx context.Context, subject, op string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%w: encode request: %v", ErrBadRequest, err)
	}
	m := nats.NewMsg(subject)
	m.Data = body
	return callMsg(ctx, e.NC, m, e.Codes, resp, e.attempt(op))
}
