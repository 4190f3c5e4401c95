package mcpbridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/mark3labs/mcp-go/server"
)

// ServeStdio serves MCP on r/w (newline-delimited JSON-RPC) until ctx ends
// or r is closed; every request calls as id. The stdio bridge is one MCP
// session: its calls are one agent turn, SessionTurn().
//
// Task requests (tasks/*, task-augmented tools/call of async tools) are
// answered by the bridge before mcp-go sees them (intercept.go).
func (b *Bridge) ServeStdio(ctx context.Context, id Identity, r io.Reader, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := &lockedWriter{w: w}
	f := &stdioFilter{b: b, id: id, out: out}
	pr, pw := io.Pipe()
	go func() { _ = pw.CloseWithError(f.run(ctx, r, pw)) }()
	s := server.NewStdioServer(b.srv)
	s.SetErrorLogger(slog.NewLogLogger(b.log.Handler(), slog.LevelWarn))
	s.SetContextFunc(func(ctx context.Context) context.Context { return WithIdentity(ctx, id) })
	err := s.Listen(ctx, pr, out)
	cancel()
	_ = pr.Close()
	f.stop()
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) || errors.Is(err, io.ErrClosedPipe) {
		return nil
	}
	return err
}

// SessionTurn is the agent turn of the stdio session.
func (b *Bridge) SessionTurn() string { return "mcp-" + b.session }

// HTTPPath is the path the streamable HTTP endpoint is served on.
const HTTPPath = "/mcp"

// HTTPHandler serves MCP over streamable HTTP on HTTPPath. Every request
// must carry the caller's mandate as "Authorization: Bearer <token>"; a
// request without one, with a token that is not a mandate, or with a
// mandate the mesh's policy service refuses is answered 401 with a JSON
// body saying what to send (503 when the policy service fails otherwise).
func (b *Bridge) HTTPHandler() http.Handler {
	h := server.NewStreamableHTTPServer(b.srv, server.WithEndpointPath(HTTPPath), server.WithStreamableHTTPLogger(b.log),
		server.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
			if id, ok := r.Context().Value(identityKey{}).(Identity); ok {
				return WithIdentity(ctx, id)
			}
			return ctx
		}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || strings.TrimSpace(token) == "" {
			unauthorized(w, "invalid_request", "send the caller's mandate JWT as 'Authorization: Bearer <token>' (issue one with 'utpmesh mandate issue'; a local 'utpmesh up' writes utpmesh-data/demo-mandate.jwt)")
			return
		}
		id, err := NewIdentity("", token)
		if err != nil {
			unauthorized(w, "invalid_token", err.Error()+"; send a mandate JWT as 'Authorization: Bearer <token>' (issue one with 'utpmesh mandate issue')")
			return
		}
		if err := b.verify(r.Context(), id.Mandate); errors.Is(err, ErrMandateRefused) {
			unauthorized(w, "invalid_token", err.Error()+"; send a current mandate of this mesh and project (issue one with 'utpmesh mandate issue')")
			return
		} else if err != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		if r.Method == http.MethodPost {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, "read the request: "+err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			if req, ok := b.intercepted(r.Context(), body); ok {
				b.answerHTTP(w, r, id, req)
				return
			}
		}
		h.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

// answerHTTP answers a request the bridge serves itself (intercept.go) as
// a JSON response, for the session the request names.
func (b *Bridge) answerHTTP(w http.ResponseWriter, r *http.Request, id Identity, req *rpcRequest) {
	session := r.Header.Get(server.HeaderKeySessionID)
	resp := b.answer(r.Context(), id, session, r.Header.Get(mcpProtocolVersionHeader), req)
	w.Header().Set("Content-Type", "application/json")
	if session != "" {
		w.Header().Set(server.HeaderKeySessionID, session)
	}
	_, _ = w.Write(resp)
}

// mcpProtocolVersionHeader is the HTTP header of the negotiated version.
const mcpProtocolVersionHeader = "Mcp-Protocol-Version"

// unauthorized answers 401 with what to send, for people and for MCP
// hosts alike: the body {"error": code, "error_description": msg} and the
// same in the WWW-Authenticate challenge (RFC 6750 §3), so a host that
// reads only the header (the MCP SDKs' OAuth probing) shows the
// description instead of starting an OAuth flow it cannot finish. code is
// "invalid_request" when no token was sent, else "invalid_token".
func unauthorized(w http.ResponseWriter, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="utpmesh", error=%q, error_description="%s"`, code, challengeText(msg)))
	w.WriteHeader(http.StatusUnauthorized)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]string{"error": code, "error_description": msg})
}

// challengeText makes msg a valid error_description: RFC 6750 allows the
// printable ASCII characters but '"' and '\'.
func challengeText(msg string) string {
	b := []byte(msg)
	for i, c := range b {
		switch {
		case c == '"':
			b[i] = '\''
		case c == '\\' || c < 0x20 || c > 0x7e:
			b[i] = ' '
		}
	}
	return string(b)
}
