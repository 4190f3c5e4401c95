package echo_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"reflect"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// TestEcho calls echo through a real in-process mesh (its own NATS
// server, CardStore, registry and inbox), as an agent would.
func TestEcho(t *testing.T) {
	ctx := context.Background()
	m, err := mesh.Start(ctx, mesh.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0",
		Tools: []worker.Tool{echo.Tool()}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	ac, err := agent.New(m.Conn(), agent.Config{Project: "demo", AgentID: "echo-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ac.Close() })

	tests := []struct {
		name, args string
		status     card.Status
		code       card.ErrorCode
	}{
		{"returns its arguments", `{"x":1,"s":"a"}`, card.StatusSuccess, ""},
		{"sleep_ms out of range", `{"sleep_ms":-1}`, card.StatusFailed, card.CodeBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := ac.Call(ctx, agent.CallRequest{ToolName: echo.Name, AgentTurnID: "turn-" + t.Name(),
				Arguments: json.RawMessage(tc.args)})
			if err != nil {
				t.Fatal(err)
			}
			r := out.Result
			if r.Status != tc.status || (tc.code != "" && (r.Error == nil || r.Error.Code != tc.code)) {
				t.Fatalf("result = %+v (error %+v), want %s %s", r, r.Error, tc.status, tc.code)
			}
			var got, want any
			_ = json.Unmarshal(r.Result, &got)
			_ = json.Unmarshal([]byte(tc.args), &want)
			if tc.status == card.StatusSuccess && !reflect.DeepEqual(got, want) {
				t.Fatalf("result %s, want the arguments %s", r.Result, tc.args)
			}
		})
	}
}
