package svc

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/utpmesh/utpmesh/subjects"
)

// Tool-scoped operations: a service may also serve
//
//	cg.<ver>.<project_id>.<channel_id>.svc.<service>.<op>.<tool>
//
// (subjects.ToolService), one token more than its plain operations: the
// tool whose worker identity alone may publish them (internal/meshauth),
// which is what the handler may rely on. Same wire format, same queue
// group, same client (Call).

// ToolHandlerFunc handles one request on a tool-scoped subject. ts names
// the op and the tool token of the subject.
type ToolHandlerFunc func(ctx context.Context, ts subjects.ToolSubject, data []byte) (any, error)

// HandleTools registers the handler of the service's tool-scoped
// subjects, cg.<ver>.*.*.svc.<service>.*.*, which Start then subscribes
// to (in the service's queue group) besides the plain ones. It must be
// called before Start. The handler sees every op; it refuses the ones it
// does not serve (ErrBadRequest).
func (s *Server) HandleTools(h ToolHandlerFunc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sub != nil {
		return errors.New("svc: HandleTools after Start")
	}
	s.tools = h
	return nil
}

// routeTool resolves a tool-scoped request into its handler.
func (s *Server) routeTool(subject string) (subjects.ToolSubject, error) {
	ts, err := subjects.ParseToolService(subject)
	if err != nil {
		return ts, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if ts.Service != s.cfg.Service {
		return ts, fmt.Errorf("%w: service %q is not %s", ErrBadRequest, ts.Service, s.cfg.Service)
	}
	return ts, nil
}

// CodeOf maps err to its wire code through codes, as the server does (the
// code an audit record carries).
func CodeOf(codes Codes, err error) string { return codes.code(err) }

// Serve registers the handlers of ops and, when tools is not nil, of the
// tool-scoped subjects (HandleTools), then starts the server (Start).
func (s *Server) Serve(ops map[string]HandlerFunc, tools ToolHandlerFunc) error {
	for _, op := range sortedOps(ops) {
		if err := s.Handle(op, ops[op]); err != nil {
			return err
		}
	}
	if tools != nil {
		if err := s.HandleTools(tools); err != nil {
			return err
		}
	}
	return s.Start()
}

func sortedOps(ops map[string]HandlerFunc) []string {
	out := make([]string, 0, len(ops))
	for op := range ops {
		out = append(out, op)
	}
	slices.Sort(out)
	return out
}
