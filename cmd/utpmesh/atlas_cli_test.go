package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/services/catalog"
)

var atlasQuietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestATLASConfirmCancelReceipts drives the confirmation lifecycle from the
// CLI against a real mesh serving atlas.calendar and atlas.utility.
func TestATLASConfirmCancelReceipts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	late := catalog.NewLate()
	tools, err := catalog.Build([]string{"atlas.calendar", "atlas.utility"}, catalog.Deps{DataDir: dir, Context: ctx, Late: late})
	if err != nil {
		t.Fatal(err)
	}
	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Tools: tools, Logger: atlasQuietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	late.Set(m.Conn(), m.Cards())

	ag, err := agent.New(m.Conn(), agent.Config{Project: "demo", AgentID: "planner", Logger: atlasQuietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close()
	propose := func(turn, start, end string) string {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		defer ccancel()
		args, _ := json.Marshal(map[string]any{"date": "2024-01-15", "blocks": []map[string]string{{"title": "Focus", "start": start, "end": end, "type": "focus"}}})
		out, err := ag.Call(cctx, agent.CallRequest{ToolName: "CALENDAR_CREATE_BLOCKS", Arguments: args, AgentTurnID: turn})
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Status         string `json:"status"`
			ConfirmationID string `json:"confirmation_id"`
		}
		if err := json.Unmarshal(out.Result.Result, &v); err != nil || v.Status != "PENDING_CONFIRM" {
			t.Fatalf("result = %s", out.Result.Result)
		}
		return v.ConfirmationID
	}
	cli := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := run(ctx, append(args, "--nats", m.ClientURL()), env{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }})
		return out.String() + errb.String(), code
	}

	id := propose("turn-plan", "14:00", "16:00")
	out, code := cli("confirm", id, "--timeout", "30s")
	if code != 0 || !strings.Contains(out, "CALENDAR_CREATE_BLOCKS "+id+": OK") || !strings.Contains(out, "undo: CALENDAR_DELETE_BLOCKS") {
		t.Fatalf("confirm: code %d\n%s", code, out)
	}
	out, code = cli("confirm", id, "--timeout", "30s")
	if code == 0 || !strings.Contains(out, "already used") {
		t.Fatalf("second confirm: code %d\n%s", code, out)
	}
	id2 := propose("turn-plan", "16:00", "17:00")
	out, code = cli("cancel", id2, "--timeout", "30s", "--json")
	if code != 0 || !strings.Contains(out, `"SKIPPED"`) {
		t.Fatalf("cancel: code %d\n%s", code, out)
	}

	out, code = cli("receipts", "show", "turn-plan")
	if code != 0 || strings.Count(out, "CALENDAR_CREATE_BLOCKS") < 2 || !strings.Contains(out, "PENDING_CONFIRM -> OK") || !strings.Contains(out, "PENDING_CONFIRM -> SKIPPED") {
		t.Fatalf("receipts: code %d\n%s", code, out)
	}
	out, code = cli("receipts", "show", "turn-plan", "--json")
	var r struct {
		ToolCalls []struct {
			Status string `json:"status"`
		} `json:"tool_calls"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || len(r.ToolCalls) != 2 || r.ToolCalls[0].Status != "OK" || r.ToolCalls[1].Status != "SKIPPED" {
		t.Fatalf("receipts --json: code %d\n%s", code, out)
	}
	if _, code := cli("receipts", "list"); code != 2 {
		t.Fatalf("bad usage exit code = %d", code)
	}
	if _, code := cli("confirm"); code != 2 {
		t.Fatalf("bad usage exit code = %d", code)
	}
}
