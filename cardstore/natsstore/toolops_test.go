package natsstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/jsstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/internal/audit"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

var (
	_ natsstore.ToolStore = (*boltstore.Store)(nil)
	_ natsstore.ToolStore = (*jsstore.Store)(nil)
)

// toolMesh is a CardStore served over a real nats-server, a client and a
// subscription to the audit records.
type toolMesh struct {
	nc     *nats.Conn
	client *natsstore.Client
	store  storetest.ToolStore
	audits chan audit.Record
}

// The stores serveTools serves.
const (
	modeBolt    = "boltstore"
	modeGeneric = "generic"
	modeJS      = "jsstore"
	// modeJSGeneric is modeGeneric on the replicated store: how cluster
	// mode served tool-scoped writes before jsstore had its own methods.
	modeJSGeneric = "jsstore-generic"
)

// serveTools serves a store: modeBolt a bbolt store, modeJS the
// replicated store (on the test server's JetStream), both with their own
// natsstore.ToolStore methods; modeGeneric (modeJSGeneric) a bbolt
// (replicated) store with those methods hidden, so the server checks
// tool-scoped writes on top of cardstore.Store (natsstore's fallback for
// other stores).
func serveTools(t testing.TB, mode string) *toolMesh {
	t.Helper()
	srv := meshtest.NATS(t)
	var st storetest.ToolStore
	var err error
	switch mode {
	case modeBolt, modeGeneric:
		st, err = boltstore.Open(t.TempDir() + "/cards.db")
	case modeJS, modeJSGeneric:
		st, err = jsstore.Open(context.Background(), meshtest.Conn(t, srv), jsstore.Config{})
	default:
		t.Fatalf("serveTools: unknown mode %q", mode)
	}
	if err != nil {
		t.Fatal(err)
	}
	var served cardstore.Store = st
	if mode == modeGeneric || mode == modeJSGeneric {
		served = struct{ cardstore.Store }{st}
	}
	s, err := natsstore.NewServer(meshtest.Conn(t, srv), served, natsstore.ServerConfig{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()); _ = st.(io.Closer).Close() })
	nc := meshtest.Conn(t, srv)
	c, err := natsstore.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	m := &toolMesh{nc: nc, client: c, store: st, audits: make(chan audit.Record, 64)}
	p, _ := subjects.AuditPattern(subjects.DefaultVersion)
	if _, err := nc.Subscribe(p, func(msg *nats.Msg) {
		var r audit.Record
		if json.Unmarshal(msg.Data, &r) == nil {
			m.audits <- r
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return m
}

// call sends a raw request on the tool-scoped subject of op for tool.
func (m *toolMesh) call(t *testing.T, project, op, tool string, req any) error {
	t.Helper()
	subj, err := subjects.ToolService(subjects.DefaultVersion, project, "default", natsstore.ServiceName, op, tool)
	if err != nil {
		t.Fatal(err)
	}
	return svc.Call(context.Background(), m.nc, subj.String(), natsstore.Codes, req, &json.RawMessage{})
}

// waitAudit waits for the audit record of a refusal whose reason holds want.
func (m *toolMesh) waitAudit(t *testing.T, op, want string) audit.Record {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-m.audits:
			if r.Op == op && !r.Allowed && strings.Contains(r.Reason, want) {
				return r
			}
		case <-deadline:
			t.Fatalf("no audit record for %s naming %q", op, want)
		}
	}
}

func callCard(project, turn, call, tool string) *card.Card {
	c := storetest.ToolCallCard(project, turn, call)
	c.Content, _ = json.Marshal(card.ToolCallContent{ToolName: tool, Arguments: json.RawMessage(`{}`), TargetSubject: "cg.v1r3." + project + ".main.cmd.tool." + tool})
	return c
}

func resultCard(project, turn, call, tool string) *card.Card {
	r := storetest.ToolResultCard(project, turn, call, card.StatusSuccess)
	r.Metadata.FunctionName = tool
	return r
}

// TestToolScopedWrites: a worker claims and writes results only on its
// own tool's subject, for calls of its tool, under the claim it holds;
// every forgery is refused with a wire code and (forbidden ones) audited.
// The same table runs against the stores with natsstore.ToolStore (bbolt,
// jsstore) and one without (the server's generic checks).
func TestToolScopedWrites(t *testing.T) {
	for _, mode := range []string{modeBolt, modeJS, modeGeneric} {
		t.Run(mode, func(t *testing.T) { testToolScopedWrites(t, mode) })
	}
}

func testToolScopedWrites(t *testing.T, mode string) {
	ctx := context.Background()
	m := serveTools(t, mode)
	echo := cardstore.WithTool(ctx, "echo")
	lease := 5 * time.Second

	// The legitimate path: claim on claim.echo, write under it.
	if err := m.client.Put(ctx, callCard("p", "t1", "c1", "echo")); err != nil {
		t.Fatal(err)
	}
	cl, err := m.client.Claim(echo, cardstore.ClaimRequest{ProjectID: "p", Key: cardstore.CallKey{AgentTurnID: "t1", ToolCallID: "c1"}.String(), Holder: "w1/1", Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	r1 := resultCard("p", "t1", "c1", "echo")
	if err := m.client.Put(ctx, r1); err != nil {
		t.Fatalf("legitimate result: %v", err)
	}
	if _, err := m.store.FindToolResult(ctx, "p", "t1", "c1"); err != nil {
		t.Fatalf("result not stored: %v", err)
	}

	// Calls of another tool, and claims to forge under.
	for _, c := range []*card.Card{callCard("p", "t2", "c2", "atlas_task_list"), callCard("p", "t3", "c3", "echo"), callCard("p", "t4", "c4", "echo")} {
		if err := m.store.Put(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	coreClaim, err := m.store.Claim(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: cardstore.CallKey{AgentTurnID: "t4", ToolCallID: "c4"}.String(), Holder: "core", Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	held, err := m.client.Claim(echo, cardstore.ClaimRequest{ProjectID: "p", Key: cardstore.CallKey{AgentTurnID: "t3", ToolCallID: "c3"}.String(), Holder: "w2/1", Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.client.Claim(echo, cardstore.ClaimRequest{ProjectID: "p", Key: "toolcall/t8/c8", Holder: "w8/1", Lease: lease}); err != nil {
		t.Fatal(err)
	}
	put := func(project, turn, call, fn string, claim any) map[string]any {
		return map[string]any{"cards": []*card.Card{resultCard(project, turn, call, fn)}, "claim": claim}
	}
	start := func(turn, call, holder string) map[string]any {
		return map[string]any{"agent_turn_id": turn, "tool_call_id": call, "holder": holder, "lease_ms": 1000}
	}
	tests := []struct {
		name, op, tool string
		req            any
		code           string
		audited        string // a substring of the audit record's reason; "" when not audited
	}{
		{"echo worker claims another tool's call", natsstore.OpClaim, "echo",
			map[string]any{"key": cardstore.CallKey{AgentTurnID: "t2", ToolCallID: "c2"}.String(), "holder": "evil", "lease_ms": 1000}, natsstore.CodeForbidden, `calls tool "atlas_task_list"`},
		{"echo worker writes another tool's result", natsstore.OpPutResult, "echo",
			put("p", "t2", "c2", "echo", map[string]any{"holder": "evil", "token": 1}), natsstore.CodeForbidden, `calls tool "atlas_task_list"`},
		{"result names another tool than the subject", natsstore.OpPutResult, "echo",
			put("p", "t3", "c3", "atlas_task_list", map[string]any{"holder": "w2/1", "token": held.Token}), natsstore.CodeForbidden, "metadata.function_name"},
		{"result without a claim field", natsstore.OpPutResult, "echo",
			put("p", "t3", "c3", "echo", nil), natsstore.CodeForbidden, "no claim given"},
		{"result for a call nobody claimed", natsstore.OpPutResult, "echo",
			put("p", "t9", "c9", "echo", map[string]any{"holder": "w1/9", "token": 1}), natsstore.CodeForbidden, "has no claim"},
		{"result under the core's claim", natsstore.OpPutResult, "echo",
			put("p", "t4", "c4", "echo", map[string]any{"holder": "core", "token": coreClaim.Token}), natsstore.CodeForbidden, `is claimed for tool ""`},
		{"result under another holder's claim", natsstore.OpPutResult, "echo",
			put("p", "t3", "c3", "echo", map[string]any{"holder": "w3/1", "token": held.Token}), natsstore.CodeClaimLost, ""},
		{"result under a stale fencing token", natsstore.OpPutResult, "echo",
			put("p", "t3", "c3", "echo", map[string]any{"holder": "w2/1", "token": held.Token + 1}), natsstore.CodeClaimLost, ""},
		{"echo worker releases the core's claim", natsstore.OpRelease, "echo",
			map[string]any{"key": cardstore.CallKey{AgentTurnID: "t4", ToolCallID: "c4"}.String(), "holder": "core"}, natsstore.CodeForbidden, `taken for tool ""`},
		{"second result of an answered call", natsstore.OpPutResult, "echo",
			put("p", "t1", "c1", "echo", map[string]any{"holder": cl.Holder, "token": cl.Token}), natsstore.CodeResultExists, ""},
		{"unknown tool-scoped op", "get", "echo", map[string]any{}, svc.CodeBadRequest, ""},
		{"holder renews its claim for another tool", natsstore.OpClaim, "atlas_task_list",
			map[string]any{"key": "toolcall/t8/c8", "holder": "w8/1", "lease_ms": 1000}, natsstore.CodeForbidden, `taken for tool "echo"`},
		{"echo worker starts another tool's call", natsstore.OpStartCall, "echo",
			start("t2", "c2", "evil"), natsstore.CodeForbidden, `calls tool "atlas_task_list"`},
		{"holder starts its claimed call for another tool", natsstore.OpStartCall, "atlas_task_list",
			start("t8", "c8", "w8/1"), natsstore.CodeForbidden, `taken for tool "echo"`},
		{"start of a call another worker holds", natsstore.OpStartCall, "echo",
			start("t3", "c3", "w9/1"), natsstore.CodeClaimHeld, ""},
		{"start without a holder", natsstore.OpStartCall, "echo",
			start("t3", "c3", ""), svc.CodeBadRequest, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := m.call(t, "p", tc.op, tc.tool, tc.req)
			var re *svc.RemoteError
			if !errors.As(err, &re) || re.Code != tc.code {
				t.Fatalf("%s = %v, want code %s", tc.op, err, tc.code)
			}
			if tc.audited != "" {
				r := m.waitAudit(t, tc.op, tc.audited)
				if r.Actor != "tool:"+tc.tool || r.Code != natsstore.CodeForbidden || r.Project != "p" || r.Service != "cardstore" {
					t.Fatalf("audit record = %+v", r)
				}
			}
		})
	}
	for _, call := range [][2]string{{"t2", "c2"}, {"t3", "c3"}, {"t4", "c4"}, {"t9", "c9"}} {
		if _, err := m.store.FindToolResult(ctx, "p", call[0], call[1]); !errors.Is(err, cardstore.ErrNotFound) {
			t.Fatalf("a forged result of %v was stored: %v", call, err)
		}
	}

	// Leases on other keys go through claim_key/release_key/get_claim on
	// the subject of the service that owns the key (<service>/…), which
	// refuse a tool call's key and another service's.
	if _, err := m.client.Claim(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: "atlas.workflows/run/r1", Holder: "sched", Lease: lease}); err != nil {
		t.Fatalf("service lease via claim_key: %v", err)
	}
	if c, err := m.client.GetClaim(ctx, "p", "atlas.workflows/run/r1"); err != nil || c.Holder != "sched" {
		t.Fatalf("service lease via get_claim = %+v, %v", c, err)
	}
	if err := m.client.Release(ctx, "p", "atlas.workflows/run/r1", "sched"); err != nil {
		t.Fatalf("service lease release via release_key: %v", err)
	}
	for _, tc := range []struct{ op, service, key string }{
		{natsstore.OpClaimKey, "atlas.notes", "atlas.tasks/state"},
		{natsstore.OpReleaseKey, "atlas.notes", "atlas.tasks/state"},
		{natsstore.OpGetClaim, "atlas.notes", "atlas.tasks/state"},
		{natsstore.OpClaimKey, "echo", "toolcall/t3/c3"},
		{natsstore.OpClaimKey, "echo", "echoes/x"},
	} {
		err := m.call(t, "p", tc.op, tc.service, map[string]any{"key": tc.key, "holder": "evil", "lease_ms": 3600000})
		if !errors.Is(err, cardstore.ErrForbidden) || !strings.Contains(err.Error(), "lease namespace") {
			t.Fatalf("%s of %s on %s's subject = %v, want forbidden", tc.op, tc.key, tc.service, err)
		}
		if r := m.waitAudit(t, tc.op, tc.key); r.Code != natsstore.CodeForbidden || r.Detail["service"] != subjects.ToolToken(tc.service) {
			t.Fatalf("audit record of %s = %+v", tc.op, r)
		}
	}
	for _, op := range []string{natsstore.OpClaimKey, natsstore.OpReleaseKey} {
		err := svc.Call(ctx, m.nc, "cg.v1r3.p.default.svc.cardstore."+op, natsstore.Codes,
			map[string]any{"key": cardstore.CallKey{AgentTurnID: "t3", ToolCallID: "c3"}.String(), "holder": "evil", "lease_ms": 1000}, &json.RawMessage{})
		if !errors.Is(err, cardstore.ErrForbidden) || !strings.Contains(err.Error(), "on the tool's subject") {
			t.Fatalf("%s of a tool call's key = %v, want forbidden", op, err)
		}
	}
	// Re-sending the stored result is a no-op success, as with put.
	if err := m.call(t, "p", natsstore.OpPutResult, "echo", map[string]any{"cards": []*card.Card{r1}, "claim": map[string]any{"holder": "x", "token": 9}}); err != nil {
		t.Fatalf("identical result again: %v", err)
	}
	// The holder of t3's claim still writes its result.
	if err := m.call(t, "p", natsstore.OpPutResult, "echo", put("p", "t3", "c3", "echo", map[string]any{"holder": "w2/1", "token": held.Token})); err != nil {
		t.Fatalf("the claim holder's result: %v", err)
	}
	// Release through the client on the tool's subject.
	if _, err := m.client.Claim(echo, cardstore.ClaimRequest{ProjectID: "p", Key: "toolcall/t5/c5", Holder: "w1/5", Lease: lease}); err != nil {
		t.Fatal(err)
	}
	if err := m.client.Release(echo, "p", "toolcall/t5/c5", "w1/5"); err != nil {
		t.Fatalf("release on the tool's subject: %v", err)
	}
	// start_call: a call another worker holds names that worker; an
	// answered call of another tool returns its result (a read any worker
	// may make) and takes no claim; without a tool in ctx the client
	// refuses to send it.
	startReq := func(turn, call, holder string) cardstore.StartCallRequest {
		return cardstore.StartCallRequest{ProjectID: "p", AgentTurnID: turn, ToolCallID: call, Holder: holder, Lease: lease}
	}
	if _, err := m.client.StartCall(echo, startReq("t10", "c10", "w10/1")); err != nil {
		t.Fatal(err)
	}
	var heldErr *cardstore.ClaimHeldError
	if _, err := m.client.StartCall(echo, startReq("t10", "c10", "w9/1")); !errors.As(err, &heldErr) || heldErr.Holder != "w10/1" {
		t.Fatalf("start of a held call = %v, want a *ClaimHeldError naming w10/1", err)
	}
	answered := resultCard("p", "t6", "c6", "atlas_task_list")
	if err := m.store.Put(ctx, callCard("p", "t6", "c6", "atlas_task_list"), answered); err != nil {
		t.Fatal(err)
	}
	if res, err := m.client.StartCall(echo, startReq("t6", "c6", "w6/1")); err != nil || res.Result == nil || res.Result.CardID != answered.CardID || res.Claim != nil {
		t.Fatalf("echo starting an answered atlas call = %+v, %v; want its result and no claim", res, err)
	}
	if _, err := m.client.StartCall(ctx, startReq("t7", "c7", "w7/1")); !errors.Is(err, cardstore.ErrInvalid) || !strings.Contains(err.Error(), "cardstore.WithTool") {
		t.Fatalf("start without a tool in ctx = %v, want ErrInvalid naming WithTool", err)
	}
	// The core's plain put_result is not checked (NATS permissions keep
	// workers and agents off it).
	if err := m.client.Put(ctx, resultCard("p", "t4", "c4", "echo")); err != nil {
		t.Fatalf("core result: %v", err)
	}
}

// TestToolScopedTakeOver: after a take-over, the old holder's late result
// is refused (claim_lost) and the new holder's accepted: the fencing token
// decides, not who writes first.
func TestToolScopedTakeOver(t *testing.T) {
	for _, mode := range []string{modeBolt, modeJS} {
		t.Run(mode, func(t *testing.T) { testToolScopedTakeOver(t, mode) })
	}
}

func testToolScopedTakeOver(t *testing.T, mode string) {
	ctx := context.Background()
	m := serveTools(t, mode)
	if err := m.store.Put(ctx, callCard("p", "t", "c", "echo")); err != nil {
		t.Fatal(err)
	}
	key := cardstore.CallKey{AgentTurnID: "t", ToolCallID: "c"}.String()
	old, err := m.store.ClaimTool(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: key, Holder: "old", Lease: cardstore.MinLease}, "echo")
	if err != nil {
		t.Fatal(err)
	}
	var cur *cardstore.Claim
	for cur == nil || !cur.TakenOver { // wait for the lease to lapse (store clock)
		cur, err = m.store.ClaimTool(ctx, cardstore.ClaimRequest{ProjectID: "p", Key: key, Holder: "new", Lease: time.Minute}, "echo")
		if err != nil && !errors.Is(err, cardstore.ErrClaimHeld) {
			t.Fatal(err)
		}
		if err != nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	err = m.store.PutToolResult(ctx, "echo", "old", old.Token, resultCard("p", "t", "c", "echo"))
	if !errors.Is(err, cardstore.ErrClaimLost) {
		t.Fatalf("old holder's result = %v, want ErrClaimLost", err)
	}
	if err := m.store.PutToolResult(ctx, "echo", "new", cur.Token, resultCard("p", "t", "c", "echo")); err != nil {
		t.Fatalf("new holder's result: %v", err)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
