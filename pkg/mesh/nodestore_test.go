package mesh_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/boltinbox"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// TestInboxFileMigrates: a data directory from before the node file
// (cards.db and inbox.db) starts: inbox.db's entries are in cards.db,
// inbox.db is renamed inbox.db.migrated, and calls go on (their entries
// stored with their results, in cards.db).
func TestInboxFileMigrates(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	old, err := boltinbox.Open(filepath.Join(dir, "inbox.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rep := &utp.Report{ToolCallID: "k1", AgentTurnID: "t-old", AgentID: "agent-old", ToolResultCardID: card.NewID(),
		Status: card.StatusSuccess, AfterExecution: card.Suspend}
	before, _, err := old.Insert(ctx, "demo", "main", rep, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	m, err := mesh.Start(ctx, mesh.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet, Tools: []worker.Tool{echo.Tool()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	if _, err := os.Stat(filepath.Join(dir, "inbox.db")); !os.IsNotExist(err) {
		t.Fatalf("inbox.db after start: %v, want renamed", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "inbox.db.migrated")); err != nil {
		t.Fatal(err)
	}
	if m.InboxDB() != m.CardsDB() {
		t.Fatal("the inbox is not in the node file")
	}
	got, err := m.Inbox().Get(ctx, "demo", before.InboxID)
	if err != nil || got.ToolCallID != "k1" || got.State != inbox.StatePending {
		t.Fatalf("migrated entry = %+v, %v", got, err)
	}

	ac, err := agent.New(m.Conn(), agent.Config{Project: "demo", AgentID: "agent-new"})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	out, err := ac.Call(ctx, agent.CallRequest{ToolName: "echo", AgentTurnID: "t-new", Arguments: json.RawMessage(`{"x":1}`)})
	if err != nil || out.Result.Status != card.StatusSuccess {
		t.Fatalf("call: %v %+v", err, out)
	}
	es, err := m.Inbox().List(ctx, "demo", inbox.ListQuery{AgentID: "agent-new", State: inbox.StateAll, Limit: 10})
	if err != nil || len(es) != 1 || es[0].ToolResultCardID != out.ResultCard.CardID {
		t.Fatalf("the call's entries = %+v, %v; want one, for its result", es, err)
	}
}
