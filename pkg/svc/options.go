package svc

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/subjects"
)

// DefaultChannel is the channel token a service client uses unless told
// otherwise (WithChannel).
const DefaultChannel = "default"

// ClientOption configures the Endpoint of a service client: the NATS
// clients of the CardStore (cardstore/natsstore), the registry
// (pkg/registry/natsreg) and the inbox share this one option set.
type ClientOption func(*Endpoint) error

// WithVersion sets the protocol version token (default subjects.DefaultVersion).
func WithVersion(ver string) ClientOption {
	return func(e *Endpoint) error {
		if err := subjects.ValidateToken("version", ver); err != nil {
			return fmt.Errorf("WithVersion: %w", err)
		}
		e.Version = ver
		return nil
	}
}

// WithChannel sets the channel token of the request subjects (default
// DefaultChannel). The channel does not isolate a service's data; the
// project does.
func WithChannel(channel string) ClientOption {
	return func(e *Endpoint) error {
		if err := subjects.ValidateToken("channel_id", channel); err != nil {
			return fmt.Errorf("WithChannel: %w", err)
		}
		e.Channel = channel
		return nil
	}
}

// WithTimeout sets the timeout of a request whose context has no deadline
// (default DefaultTimeout).
func WithTimeout(d time.Duration) ClientOption {
	return func(e *Endpoint) error {
		if d <= 0 {
			return fmt.Errorf("WithTimeout: %v is not a positive duration", d)
		}
		e.Timeout = d
		return nil
	}
}

// WithAttempt sets how long a request of an op that may be resent (Ops)
// waits for a reply before a copy is sent (default DefaultAttempt).
func WithAttempt(d time.Duration) ClientOption {
	return func(e *Endpoint) error {
		if d <= 0 {
			return fmt.Errorf("WithAttempt: %v is not a positive duration", d)
		}
		e.Attempt = d
		return nil
	}
}

// ErrNilConn is the error of a client built on a nil NATS connection.
var ErrNilConn = errors.New("nil NATS connection")

// NewClientEndpoint returns the Endpoint of a client of service: nc, the
// defaults of NewEndpoint, then opts in order. A nil nc is ErrNilConn.
func NewClientEndpoint(nc *nats.Conn, service string, codes Codes, opts ...ClientOption) (Endpoint, error) {
	if nc == nil {
		return Endpoint{}, ErrNilConn
	}
	e := NewEndpoint(nc, service, codes)
	for _, o := range opts {
		if err := o(&e); err != nil {
			return Endpoint{}, err
		}
	}
	return e, nil
}
