package natsstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/cardstore/natsstore"
	"github.com/utpmesh/utpmesh/cardstore/storetest"
	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/svc"
)

// TestInvalidUTF8OnTheWire: a request whose body holds invalid UTF-8 — a
// client in another language, or one that skips validation — is refused
// bad_request naming the JSON path of the field, and nothing is stored.
// Go's encoding/json, which decodes the body, would have stored U+FFFD.
func TestInvalidUTF8OnTheWire(t *testing.T) {
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
	client, err := natsstore.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	note := storetest.NoteCard("p", "turn-1", "TEXT")
	note.Metadata.AgentID = "AGENT"
	body, err := json.Marshal(map[string]any{"cards": []any{note}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, old, field string
	}{
		{"content", `"TEXT"`, "cards[0].content.text"},
		{"metadata", `"AGENT"`, "cards[0].metadata.agent_id"},
	}
	ep := svc.NewEndpoint(nc, natsstore.ServiceName, natsstore.Codes)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := bytes.Replace(body, []byte(tc.old), []byte("\"a\xffb\""), 1)
			err := ep.Call(ctx, "p", natsstore.OpPut, json.RawMessage(raw), &struct{}{})
			if !errors.Is(err, cardstore.ErrInvalid) || !strings.Contains(err.Error(), tc.field+" holds invalid UTF-8") {
				t.Fatalf("put = %v, want bad_request naming %s", err, tc.field)
			}
			if _, err := client.Get(ctx, "p", note.CardID); !errors.Is(err, cardstore.ErrNotFound) {
				t.Fatalf("the card was stored (%v)", err)
			}
		})
	}
	// A claim holder is a string of the body like any other.
	claim := []byte("{\"key\":\"k\",\"holder\":\"w\xff\",\"lease_ms\":1000}")
	if err := ep.Call(ctx, "p", natsstore.OpClaim, json.RawMessage(claim), &struct{}{}); !errors.Is(err, cardstore.ErrInvalid) || !strings.Contains(err.Error(), "holder") {
		t.Fatalf("claim = %v, want bad_request naming holder", err)
	}
}
