package natsreg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// DefaultChannel is the channel token a Client uses unless told otherwise.
const DefaultChannel = svc.DefaultChannel

// Client is a registry.Registry that talks to a Server over NATS.
type Client struct {
	ep svc.Endpoint
}

var _ registry.Registry = (*Client)(nil)

// NewClient returns a Registry backed by the registry service reachable on nc.
func NewClient(nc *nats.Conn, opts ...svc.ClientOption) (*Client, error) {
	ep, err := svc.NewClientEndpoint(nc, ServiceName, Codes, opts...)
	if err != nil {
		return nil, fmt.Errorf("natsreg: %w", err)
	}
	ep.Ops = Ops
	return &Client{ep: ep}, nil
}

// call sends one request on the project's subject. The caller has checked
// ctx and the project_id (registry.CheckProjectID).
func (c *Client) call(ctx context.Context, project, op string, req, resp any) error {
	err := c.ep.Call(ctx, project, op, req, resp)
	var re *svc.RemoteError
	if !errors.As(err, &re) && errors.Is(err, svc.ErrBadRequest) {
		return &registry.FieldError{Field: "project_id", Msg: err.Error()}
	}
	return remoteFieldError(err)
}

// Put implements registry.Registry. The server validates the entry. The
// client validates it itself (registry.Validate) only when JSON cannot
// carry it unchanged: values that are not valid JSON, NaN, strings that
// are not valid UTF-8, options.Extra keys that shadow typed options.
func (c *Client) Put(ctx context.Context, e *registry.Entry) (*registry.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if e == nil {
		return nil, registry.Validate(nil)
	}
	if err := registry.CheckProjectID(e.ProjectID); err != nil {
		return nil, err
	}
	data, err := encodeEntry(e)
	if err != nil {
		return nil, err
	}
	if e.ToolName == "" {
		return nil, registry.Validate(e)
	}
	// On the tool's own subject: a worker identity may register only its
	// own tools (docs/security.md); core and admin may publish any.
	var r entryReply
	if err := c.callTool(ctx, e.ProjectID, OpPut, e.ToolName, putRequestWire{Entry: data}, &r); err != nil {
		return nil, err
	}
	return replyEntry(r)
}

// encodeEntry returns e's JSON, or the validation error of an entry that
// JSON would alter.
func encodeEntry(e *registry.Entry) (json.RawMessage, error) {
	data, err := json.Marshal(e)
	// encoding/json writes invalid UTF-8 as the escape \ufffd (a real
	// U+FFFD stays raw), so the escape flags a replaced byte; a false
	// alarm only costs a local Validate.
	lossy := err != nil || bytes.Contains(data, []byte(`\ufffd`))
	if !lossy && len(e.Options.Extra) > 0 {
		// Options.MarshalJSON drops Extra keys named like typed options.
		var back registry.Entry
		lossy = json.Unmarshal(data, &back) != nil || len(back.Options.Extra) != len(e.Options.Extra)
	}
	if lossy {
		if verr := registry.Validate(e); verr != nil {
			return nil, verr
		}
	}
	if err != nil {
		return nil, &registry.FieldError{Field: "entry", Msg: "cannot be encoded as JSON: " + err.Error()}
	}
	return data, nil
}

// Get implements registry.Registry.
func (c *Client) Get(ctx context.Context, projectID, toolName string) (*registry.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := registry.CheckProjectID(projectID); err != nil {
		return nil, err
	}
	var r entryReply
	if err := c.call(ctx, projectID, OpGet, keyRequest{ToolName: toolName}, &r); err != nil {
		return nil, err
	}
	return replyEntry(r)
}

// List implements registry.Registry.
func (c *Client) List(ctx context.Context, projectID string) ([]*registry.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := registry.CheckProjectID(projectID); err != nil {
		return nil, err
	}
	var r listReply
	if err := c.call(ctx, projectID, OpList, listRequest{}, &r); err != nil {
		return nil, err
	}
	for i, e := range r.Entries {
		if e == nil {
			return nil, fmt.Errorf("%w: list reply: entries[%d] is null", svc.ErrBadReply, i)
		}
	}
	if r.Entries == nil {
		r.Entries = []*registry.Entry{}
	}
	return r.Entries, nil
}

// Delete implements registry.Registry.
func (c *Client) Delete(ctx context.Context, projectID, toolName string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := registry.CheckProjectID(projectID); err != nil {
		return err
	}
	return c.signedCall(ctx, projectID, OpDelete, keyRequest{ToolName: toolName}, &emptyReply{})
}

func replyEntry(r entryReply) (*registry.Entry, error) {
	if r.Entry == nil {
		return nil, fmt.Errorf("%w: reply has no entry", svc.ErrBadReply)
	}
	return r.Entry, nil
}

// fieldRemoteError is returned for a bad_request or reserved reply that
// names a field (error.detail {"field", "reason"}). Its text is the
// server's message, unchanged; errors.As finds both the rebuilt
// *registry.FieldError and the *svc.RemoteError in it, so errors.Is
// matches registry.ErrInvalid (and registry.ErrReserved for a reserved
// name) as it does with a local registry.
type fieldRemoteError struct {
	field  *registry.FieldError
	remote *svc.RemoteError
}

// Error returns the server's message.
func (e *fieldRemoteError) Error() string { return e.remote.Message }

// Unwrap returns the field error and the remote error.
func (e *fieldRemoteError) Unwrap() []error { return []error{e.field, e.remote} }

// remoteFieldError wraps a field-naming error reply in a fieldRemoteError.
func remoteFieldError(err error) error {
	var re *svc.RemoteError
	if !errors.As(err, &re) || (re.Code != svc.CodeBadRequest && re.Code != CodeReserved) || len(re.Detail) == 0 {
		return err
	}
	var d fieldDetail
	if json.Unmarshal(re.Detail, &d) != nil || d.Field == "" {
		return err
	}
	return &fieldRemoteError{
		field:  &registry.FieldError{Field: d.Field, Msg: d.Reason, Reserved: re.Code == CodeReserved},
		remote: re,
	}
}
