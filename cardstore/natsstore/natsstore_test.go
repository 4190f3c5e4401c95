package natsstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// serve starts a real nats-server, a bbolt store served over it, and returns
// a client; cleanup stops everything and checks the bbolt file.
func serve(t *testing.T) (*natsstore.Client, *boltstore.Store) {
	t.Helper()
	srv := meshtest.NATS(t)
	path := filepath.Join(t.TempDir(), "cards.db")
	st, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := natsstore.NewServer(meshtest.Conn(t, srv), st, natsstore.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	client, err := natsstore.NewClient(meshtest.Conn(t, srv), svc.WithTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
		if err := st.Close(); err != nil {
			t.Error(err)
		}
		checkFile(t, path)
	})
	return client, st
}

func checkFile(t *testing.T, path string) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Errorf("consistency check: %v", err)
		return
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			t.Errorf("consistency check of %s: %v", path, err)
		}
		return nil
	})
}

// TestConformance runs the same suite as the local store, over NATS.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) cardstore.Store {
		c, _ := serve(t)
		return c
	})
}

func TestProjectScopedBySubject(t *testing.T) {
	c, _ := serve(t)
	ctx := context.Background()
	a := storetest.ToolCallCard("projA", "turn", "call")
	if err := c.Put(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "projB", a.CardID); !errors.Is(err, cardstore.ErrNotFound) {
		t.Fatalf("project B read A's card: %v", err)
	}
	b := storetest.ToolCallCard("projB", "turn", "call2")
	err := c.Put(ctx, a, b)
	if !errors.Is(err, cardstore.ErrInvalid) || !strings.Contains(err.Error(), "one project") {
		t.Fatalf("mixed-project put: %v", err)
	}
}

func TestClaimHeldCarriesHolder(t *testing.T) {
	c, _ := serve(t)
	ctx := context.Background()
	req := cardstore.ClaimRequest{ProjectID: "p", Key: "k", Holder: "w1", Lease: time.Minute}
	if _, err := c.Claim(ctx, req); err != nil {
		t.Fatal(err)
	}
	req.Holder = "w2"
	_, err := c.Claim(ctx, req)
	var held *cardstore.ClaimHeldError
	if !errors.As(err, &held) || held.Holder != "w1" || !errors.Is(err, cardstore.ErrClaimHeld) {
		t.Fatalf("err = %#v, want *ClaimHeldError naming w1", err)
	}
}

func TestUnavailable(t *testing.T) {
	srv := meshtest.NATS(t)
	c, err := natsstore.NewClient(meshtest.Conn(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(context.Background(), "p", "01890a5d-ac96-774b-bcce-b302099a8057")
	if err == nil || !strings.Contains(err.Error(), "nothing serves") {
		t.Fatalf("err = %v, want a clear 'nothing serves' error", err)
	}
	if _, err := natsstore.NewClient(nil); err == nil {
		t.Fatal("NewClient(nil) succeeded")
	}
	if _, err := natsstore.NewClient(meshtest.Conn(t, srv), svc.WithChannel("a.b")); err == nil {
		t.Fatal("WithChannel accepted a dotted channel")
	}
}

// TestResultsOnlyWithPutResult: put refuses a batch holding a tool.result
// card (wrong_op, naming put_result); the client sends such batches with
// put_result, which stores them. NATS permissions on put_result then
// decide who may write results (internal/meshauth).
func TestResultsOnlyWithPutResult(t *testing.T) {
	srv := meshtest.NATS(t)
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "cards.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := natsstore.NewServer(meshtest.Conn(t, srv), st, natsstore.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	nc := meshtest.Conn(t, srv)
	ctx := context.Background()
	call := storetest.ToolCallCard("p", "turn", "call")
	res := storetest.ToolResultCard("p", "turn", "call", card.StatusSuccess)
	ep := svc.NewEndpoint(nc, natsstore.ServiceName, natsstore.Codes)
	tests := []struct {
		name  string
		op    string
		cards []*card.Card
		want  error
	}{
		{"put a tool.call", natsstore.OpPut, []*card.Card{call}, nil},
		{"put a tool.result", natsstore.OpPut, []*card.Card{res}, natsstore.ErrWrongOp},
		{"put a batch with a tool.result", natsstore.OpPut, []*card.Card{storetest.NoteCard("p", "turn", "n"), res}, natsstore.ErrWrongOp},
		{"put_result a tool.result", natsstore.OpPutResult, []*card.Card{res}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ep.Call(ctx, "p", tc.op, map[string]any{"cards": tc.cards}, &struct{}{})
			if !errors.Is(err, tc.want) || (err != nil && !strings.Contains(err.Error(), "put_result")) {
				t.Fatalf("%s = %v, want %v naming put_result", tc.op, err, tc.want)
			}
		})
	}
	c, err := natsstore.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	res2 := storetest.ToolResultCard("p", "turn2", "call2", card.StatusSuccess)
	if err := c.Put(ctx, storetest.ToolCallCard("p", "turn2", "call2"), res2); err != nil {
		t.Fatalf("client Put with a result (put_result) = %v", err)
	}
	if got, err := c.FindToolResult(ctx, "p", "turn2", "call2"); err != nil || got.CardID != res2.CardID {
		t.Fatalf("FindToolResult = %v, %v", got, err)
	}
}
