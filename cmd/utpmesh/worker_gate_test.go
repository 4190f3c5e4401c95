package main

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// signRaw signs header and claims with priv as a compact token, bypassing
// mandate.Issue's checks (what an attacker or a buggy issuer could do).
func signRaw(t *testing.T, priv ed25519.PrivateKey, h mandate.Header, c mandate.Claims) string {
	t.Helper()
	hb, _ := json.Marshal(h)
	cb, _ := json.Marshal(c)
	in := base64.RawURLEncoding.EncodeToString(hb) + "." + base64.RawURLEncoding.EncodeToString(cb)
	if priv == nil {
		return in + "."
	}
	return in + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte(in)))
}

// sendEcho puts an echo tool.call card (with the mandate in its metadata
// when not "") and publishes its command on project demo.
func sendEcho(t *testing.T, m *mesh.Mesh, mandateTok, agentID, callID, args string) {
	t.Helper()
	sendEchoVia(t, m.Conn(), m.Cards(), mandateTok, agentID, callID, args)
}

// sendEchoVia is sendEcho through the connection nc and CardStore put.
func sendEchoVia(t *testing.T, nc *nats.Conn, cards interface {
	Put(context.Context, ...*card.Card) error
}, mandateTok, agentID, callID, args string) {
	t.Helper()
	ctx := context.Background()
	subj := "cg.v1r3.demo.main.cmd.tool.echo"
	content, _ := json.Marshal(card.ToolCallContent{ToolName: "echo", Arguments: json.RawMessage(args), TargetSubject: subj})
	turn := "turn-" + callID
	cc := &card.Card{CardID: card.NewID(), ProjectID: "demo", Type: card.TypeToolCall, Content: content, ToolCallID: callID,
		CreatedAt: time.Now().UTC(), Metadata: card.Metadata{AgentID: agentID, AgentTurnID: turn, TurnEpoch: 1, StepID: "s1"}}
	if mandateTok != "" {
		raw, _ := json.Marshal(mandateTok)
		cc.Metadata.Extra = map[string]json.RawMessage{"mandate": raw}
	}
	if err := cards.Put(ctx, cc); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	body, _ := json.Marshal(utp.Command{AgentID: agentID, AgentTurnID: turn, TurnEpoch: 1, ToolCallID: callID,
		AfterExecution: card.Suspend, ToolCallCardID: cc.CardID, StepID: "s1", ToolName: "echo"})
	if _, err := js.Publish(ctx, subj, body); err != nil {
		t.Fatal(err)
	}
}

// waitResults waits for the wakeups of the calls and returns each call's
// tool.result (status, error code, message).
func waitResults(t *testing.T, m *mesh.Mesh, wake chan *nats.Msg, calls map[string]bool) map[string]*card.ToolResultContent {
	t.Helper()
	out := map[string]*card.ToolResultContent{}
	deadline := time.After(60 * time.Second)
	for len(out) < len(calls) {
		select {
		case msg := <-wake:
			var wk utp.Wakeup
			if err := json.Unmarshal(msg.Data, &wk); err != nil {
				t.Fatalf("wakeup %s: %v", msg.Data, err)
			}
			if !calls[wk.ToolCallID] {
				continue
			}
			res, err := m.Cards().FindToolResult(context.Background(), "demo", "turn-"+wk.ToolCallID, wk.ToolCallID)
			if err != nil {
				t.Fatalf("result of %s: %v", wk.ToolCallID, err)
			}
			tr, err := res.ToolResult()
			if err != nil {
				t.Fatal(err)
			}
			out[wk.ToolCallID] = tr
		case <-deadline:
			t.Fatalf("results after 60s: %d of %d", len(out), len(calls))
		}
	}
	return out
}

// TestExternalWorkerGate: on raw commands of a raw-mode project an
// external `utpmesh worker echo` evaluates the same Cedar gate as `up`,
// reading the policies and the issuer key from the mesh. Every unauthorized variant of issue 12 ends auth_failed and
// never executes; a valid mandate runs.
func TestExternalWorkerGate(t *testing.T) {
	ctx := context.Background()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Auth: &mesh.AuthConfig{}, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	w := startProc(t, "worker", "--nats", m.ClientURL(), "--log-level", "debug", "echo")
	w.waitLine(t, "worker serving")

	a := m.Auth()
	key, _, err := a.Keys.Ensure(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := a.Keys.Ensure(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Store.PutPolicies(ctx, "demo", `permit(principal, action == Action::"echo", resource in Project::"demo");`); err != nil {
		t.Fatal(err)
	}
	// Raw commands (the mandate in the card) reach the worker only in a
	// project that opted into them; there the worker runs the full gate.
	if err := a.Store.PutConfig(ctx, "demo", authz.ProjectConfig{Commands: authz.CommandsRaw}); err != nil {
		t.Fatal(err)
	}
	own, err := mandate.GenerateKey("demo") // an attacker's key, claiming to be demo's issuer
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	echoOnly := `permit(principal, action == Action::"echo", resource);`
	issue := func(k *mandate.IssuerKey, agent, policy string, iat, exp time.Time, booking *string) string {
		t.Helper()
		tok, err := mandate.Issue(k, mandate.Claims{Subject: agent, IssuedAt: iat.Unix(), ExpiresAt: exp.Unix(), Resource: booking,
			Mandate: mandate.Grant{PolicySet: policy}}, iat)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	claims := func(agent, policy string) mandate.Claims {
		return mandate.Claims{JTI: "jti-" + agent, Issuer: mandate.IssuerName("demo"), Subject: agent, IssuedAt: now.Unix(),
			ExpiresAt: now.Add(time.Hour).Unix(), ATPVersion: mandate.ATPVersion, ParentChain: []string{},
			Mandate: mandate.Grant{RARFormat: mandate.RARFormat, PolicySet: policy}}
	}
	hdr := func(kid string) mandate.Header {
		return mandate.Header{Alg: mandate.Algorithm, Typ: mandate.TokenType, Kid: kid}
	}
	valid := issue(key, "agent-forged", echoOnly, now, now.Add(time.Hour), nil)
	parts := strings.Split(valid, ".")
	forgedClaims := claims("agent-forged", `permit(principal, action, resource);`)
	cb, _ := json.Marshal(forgedClaims)
	forged := parts[0] + "." + base64.RawURLEncoding.EncodeToString(cb) + "." + parts[2] // altered claims, the real signature
	b1 := "B-1"

	tests := []struct {
		name, agent, token, args string
		wantMsg                  string
	}{
		{"no mandate", "agent-none", "", `{"x":1}`, "requires a mandate"},
		{"expired", "agent-expired", issue(key, "agent-expired", echoOnly, now.Add(-2*time.Hour), now.Add(-time.Hour), nil), `{"x":1}`, "expired"},
		{"not yet valid", "agent-future", issue(key, "agent-future", echoOnly, now.Add(time.Hour), now.Add(2*time.Hour), nil), `{"x":1}`, "in the future"},
		{"forged signature", "agent-forged", forged, `{"x":1}`, "does not verify"},
		{"alg none", "agent-none-alg", signRaw(t, nil, mandate.Header{Alg: "none", Typ: mandate.TokenType, Kid: key.KID}, claims("agent-none-alg", echoOnly)), `{"x":1}`, "alg"},
		{"own key with the real kid", "agent-ownkey", signRaw(t, own.Private, hdr(key.KID), claims("agent-ownkey", echoOnly)), `{"x":1}`, "does not verify"},
		{"own key with its own kid", "agent-ownkid", signRaw(t, own.Private, hdr(own.KID), claims("agent-ownkid", echoOnly)), `{"x":1}`, "token names key"},
		{"another agent's mandate", "agent-thief", issue(key, "agent-victim", echoOnly, now, now.Add(time.Hour), nil), `{"x":1}`, `is for agent "agent-victim"`},
		{"a mandate for another tool", "agent-other-tool", issue(key, "agent-other-tool", `permit(principal, action == Action::"pmo_cancel", resource);`, now, now.Add(time.Hour), nil), `{"x":1}`, "does not permit"},
		{"another project's issuer", "agent-other-project", issue(other, "agent-other-project", echoOnly, now, now.Add(time.Hour), nil), `{"x":1}`, "this project accepts only"},
		{"not a token", "agent-garbage", "not-a-token", `{"x":1}`, "mandate refused"},
		{"wildcard invoke_hem (signed without Issue's check)", "agent-wild", signRaw(t, key.Private, hdr(key.KID), claims("agent-wild", `permit(principal, action, resource);`)), `{"x":1}`, "HEM_INVOKE without enumerated"},
		{"booking mismatch", "agent-booking", issue(key, "agent-booking", echoOnly, now, now.Add(time.Hour), &b1), `{"x":1,"booking_object_id":"B-2"}`, "is bound to"},
	}
	wake := make(chan *nats.Msg, 64)
	wsub, _ := subjects.WakeupPattern(subjects.DefaultVersion, "demo", "*", "*")
	if _, err := m.Conn().ChanSubscribe(wsub, wake); err != nil {
		t.Fatal(err)
	}
	calls := map[string]bool{"call-valid": true}
	for i, tc := range tests {
		id := "call-bad-" + string(rune('a'+i))
		calls[id] = true
		sendEcho(t, m, tc.token, tc.agent, id, tc.args)
	}
	sendEcho(t, m, issue(key, "agent-ok", echoOnly, now, now.Add(time.Hour), nil), "agent-ok", "call-valid", `{"x":1}`)
	got := waitResults(t, m, wake, calls)

	for i, tc := range tests {
		id := "call-bad-" + string(rune('a'+i))
		t.Run(tc.name, func(t *testing.T) {
			r := got[id]
			if r.Status != card.StatusFailed || r.Error == nil || r.Error.Code != card.CodeAuthFailed || !strings.Contains(r.Error.Message, tc.wantMsg) {
				t.Fatalf("result = %+v (error %+v), want failed auth_failed mentioning %q", r, r.Error, tc.wantMsg)
			}
		})
	}
	if r := got["call-valid"]; r.Status != card.StatusSuccess {
		t.Fatalf("valid mandate: result %+v (error %+v), want success", r, r.Error)
	}
	// The same variants dispatched through the mesh's admission (the
	// default way) are refused there, with the same reasons.
	for i, tc := range tests {
		t.Run("admission: "+tc.name, func(t *testing.T) {
			ac, err := agent.New(m.Conn(), agent.Config{Project: "demo", AgentID: tc.agent, Mandate: tc.token, Logger: quietLog})
			if err != nil {
				t.Fatal(err)
			}
			defer ac.Close()
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			out, err := ac.Call(cctx, agent.CallRequest{ToolName: "echo", Arguments: json.RawMessage(tc.args), AgentTurnID: fmt.Sprintf("turn-adm-%d", i)})
			if err != nil {
				t.Fatal(err)
			}
			r := out.Result
			if r.Status != card.StatusFailed || r.Error == nil || r.Error.Code != card.CodeAuthFailed || !strings.Contains(r.Error.Message, tc.wantMsg) ||
				out.ResultCard.AuthorID != "mesh.admission" {
				t.Fatalf("result = %+v (error %+v, author %s), want failed auth_failed by the admission mentioning %q", r, r.Error, out.ResultCard.AuthorID, tc.wantMsg)
			}
		})
	}
	// Only the valid call reached the handler.
	w.mu.Lock()
	defer w.mu.Unlock()
	executed := 0
	for _, l := range w.lines {
		if !strings.Contains(l, "executing") {
			continue
		}
		if !strings.Contains(l, "call-valid") {
			t.Errorf("a refused call executed: %s", l)
		}
		executed++
	}
	if executed != 1 {
		t.Fatalf("executing lines = %d, want 1 (the valid call)", executed)
	}
}

// TestExternalWorkerGateFailsClosed: a gated worker on a mesh whose authz
// service does not answer refuses the call auth_failed; the handler never
// runs.
func TestExternalWorkerGateFailsClosed(t *testing.T) {
	ctx := context.Background()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: quietLog}) // no authz service
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	w := startProc(t, "worker", "--nats", m.ClientURL(), "--log-level", "debug", "echo")
	w.waitLine(t, "worker serving")
	wake := make(chan *nats.Msg, 4)
	wsub, _ := subjects.WakeupPattern(subjects.DefaultVersion, "demo", "*", "*")
	if _, err := m.Conn().ChanSubscribe(wsub, wake); err != nil {
		t.Fatal(err)
	}
	sendEcho(t, m, "", "agent-closed", "call-closed", `{"x":1}`)
	r := waitResults(t, m, wake, map[string]bool{"call-closed": true})["call-closed"]
	if r.Status != card.StatusFailed || r.Error == nil || r.Error.Code != card.CodeAuthFailed || !strings.Contains(r.Error.Message, "fail closed") {
		t.Fatalf("result = %+v (error %+v), want auth_failed (fail closed)", r, r.Error)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.lines {
		if strings.Contains(l, "executing") {
			t.Fatalf("the call executed without authorization: %s", l)
		}
	}
}

// TestWorkerWaitsForNATS: a worker started before the mesh retries its
// first connection (logging each attempt) and serves once NATS is up.
func TestWorkerWaitsForNATS(t *testing.T) {
	addr := "127.0.0.1:" + freePort(t)
	w := startProc(t, "worker", "--nats", "nats://"+addr, "--no-gate", "echo")
	w.waitLine(t, "NATS not reachable yet, retrying")
	m, err := mesh.Start(context.Background(), mesh.Config{DataDir: t.TempDir(), Listen: addr, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	w.waitLine(t, "connected to NATS")
	w.waitLine(t, "worker serving")
}
