package natsreg_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/registry/boltreg"
	"github.com/utpmesh/utpmesh/pkg/registry/natsreg"
	"github.com/utpmesh/utpmesh/pkg/registry/registrytest"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/subjects"
)

const ver = "v1r3"

// mesh is one NATS server with a registry Server on it.
type mesh struct {
	nc     *nats.Conn // a client connection (not the server's)
	client *natsreg.Client
}

// newMesh starts a NATS server and serves reg on it. stopped runs after the
// server has stopped (to close and check the store).
func newMesh(t *testing.T, reg registry.Registry, stopped func()) *mesh {
	t.Helper()
	ns := meshtest.NATS(t)
	srvConn := meshtest.Conn(t, ns)
	s, err := natsreg.NewServer(srvConn, reg, natsreg.ServerConfig{Version: ver, RequestTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	if want := "cg." + ver + ".*.*.svc.registry.*"; s.Subject() != want {
		t.Errorf("Subject() = %q, want %q", s.Subject(), want)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if stopped != nil {
			stopped()
		}
	})
	nc := meshtest.Conn(t, ns)
	c, err := natsreg.NewClient(nc, svc.WithVersion(ver), svc.WithChannel("ch1"), svc.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	return &mesh{nc: nc, client: c}
}

// newBoltMesh serves a boltreg.Store in a real file; cleanup stops the
// server, checks and closes the store and checks the file again.
func newBoltMesh(t *testing.T) *mesh {
	t.Helper()
	path := filepath.Join(t.TempDir(), "registry.db")
	st, err := boltreg.Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return newMesh(t, st, func() {
		if err := st.Check(); err != nil {
			t.Errorf("Check: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		checkFile(t, path)
	})
}

// checkFile reopens the closed file with plain bbolt and runs tx.Check.
func checkFile(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatalf("reopen for check: %v", err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		var first error
		for err := range tx.Check() {
			if first == nil {
				first = err
			}
		}
		return first
	})
	if err != nil {
		t.Errorf("bbolt consistency check: %v", err)
	}
}

func TestConformance(t *testing.T) {
	registrytest.Run(t, func(t *testing.T) registry.Registry { return newBoltMesh(t).client })
}

// subject returns the svc subject of op for project.
func subject(t *testing.T, project, op string) string {
	t.Helper()
	s, err := svc.Subject(ver, project, "ch1", natsreg.ServiceName, op)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestProjectIsolationOverWire(t *testing.T) {
	ctx := context.Background()
	m := newBoltMesh(t)
	for _, p := range []string{"A", "B"} {
		e := registrytest.NewEntry(p, "echo")
		e.Description = "in " + p
		if _, err := m.client.Put(ctx, e); err != nil {
			t.Fatalf("Put %s: %v", p, err)
		}
	}
	if _, err := m.client.Put(ctx, registrytest.NewEntry("B", "only_b")); err != nil {
		t.Fatal(err)
	}

	// A's subject never reaches B's entries.
	var got struct {
		Entry *registry.Entry `json:"entry"`
	}
	err := svc.Call(ctx, m.nc, subject(t, "A", "get"), natsreg.Codes, map[string]string{"tool_name": "only_b"}, &got)
	if !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("get only_b on A: err = %v, want ErrNotFound", err)
	}
	var list struct {
		Entries []*registry.Entry `json:"entries"`
	}
	if err := svc.Call(ctx, m.nc, subject(t, "A", "list"), natsreg.Codes, struct{}{}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Entries) != 1 || list.Entries[0].ProjectID != "A" || list.Entries[0].Description != "in A" {
		t.Errorf("list on A = %+v", list.Entries)
	}
	err = svc.Call(ctx, m.nc, subject(t, "A", "delete"), natsreg.Codes, map[string]string{"tool_name": "only_b"}, nil)
	if !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("delete only_b on A: err = %v, want ErrNotFound", err)
	}

	// A put on A's subject naming project B is refused, naming both.
	b := registrytest.NewEntry("B", "echo")
	b.Description = "overwritten"
	err = svc.Call(ctx, m.nc, subject(t, "A", "put"), natsreg.Codes, map[string]any{"entry": b}, nil)
	if !errors.Is(err, registry.ErrInvalid) || errors.Is(err, registry.ErrReserved) ||
		!strings.Contains(err.Error(), `"A"`) || !strings.Contains(err.Error(), `"B"`) || !strings.Contains(err.Error(), "project_id") {
		t.Errorf("put B's entry on A: err = %v, want bad_request naming project_id, A and B", err)
	}
	var re *svc.RemoteError
	if !errors.As(err, &re) || re.Code != svc.CodeBadRequest {
		t.Errorf("put B's entry on A: code = %+v, want bad_request", re)
	}
	if e, err := m.client.Get(ctx, "B", "echo"); err != nil || e.Description != "in B" {
		t.Errorf("B/echo after refused put = %+v, %v", e, err)
	}

	// An entry without project_id goes to the subject's project.
	anon := registrytest.NewEntry("", "anon")
	var put struct {
		Entry *registry.Entry `json:"entry"`
	}
	if err := svc.Call(ctx, m.nc, subject(t, "A", "put"), natsreg.Codes, map[string]any{"entry": anon}, &put); err != nil {
		t.Fatalf("put without project_id: %v", err)
	}
	if put.Entry == nil || put.Entry.ProjectID != "A" {
		t.Errorf("put without project_id stored %+v", put.Entry)
	}
	if _, err := m.client.Get(ctx, "A", "anon"); err != nil {
		t.Errorf("Get(A, anon): %v", err)
	}
	if _, err := m.client.Get(ctx, "B", "anon"); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("Get(B, anon): err = %v, want ErrNotFound", err)
	}
}

// TestErrorsMapBack checks that every registry sentinel survives the wire
// (errors.Is), with the server's message unchanged.
func TestErrorsMapBack(t *testing.T) {
	ctx := context.Background()
	m := newBoltMesh(t)
	local := registry.NewMemory(nil)

	_, err := m.client.Get(ctx, "proj", "nope")
	_, lerr := local.Get(ctx, "proj", "nope")
	if !errors.Is(err, registry.ErrNotFound) || err.Error() != lerr.Error() {
		t.Errorf("not found: err = %v, want %v", err, lerr)
	}

	// Sent to the server (the client does not validate encodable entries).
	for _, c := range []registrytest.Case{
		{Name: "reserved", Field: "tool_name", Reserved: true, Mutate: func(e *registry.Entry) { e.ToolName = "List_Tools" }},
		{Name: "invalid", Field: "options.args.defaults.times", Mutate: func(e *registry.Entry) {
			e.Options.Args.Defaults["times"] = json.RawMessage(`"three"`)
		}},
	} {
		e := registrytest.NewEntry("proj", "echo")
		c.Mutate(e)
		_, err := m.client.Put(ctx, e)
		registrytest.CheckError(t, c, err)
		var re *svc.RemoteError
		if !errors.As(err, &re) {
			t.Fatalf("%s: %v is not a remote error", c.Name, err)
		}
		wantCode := svc.CodeBadRequest
		if c.Reserved {
			wantCode = natsreg.CodeReserved
		}
		if re.Code != wantCode {
			t.Errorf("%s: code %q, want %q", c.Name, re.Code, wantCode)
		}
		lerr := registry.Validate(e)
		if err.Error() != lerr.Error() {
			t.Errorf("%s: message %q, want the local %q", c.Name, err, lerr)
		}
		var fe *registry.FieldError
		if !errors.As(err, &fe) || fe.Field != c.Field || fe.Reserved != c.Reserved || fe.Error() != lerr.Error() {
			t.Errorf("%s: FieldError = %+v", c.Name, fe)
		}
	}

	// Closed: a closed store behind a running server.
	mem := registry.NewMemory(nil)
	cm := newMesh(t, mem, nil)
	mem.Close()
	if _, err := cm.client.List(ctx, "proj"); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("closed: err = %v, want ErrClosed", err)
	}

	// The table itself, for every sentinel, through a bare svc server.
	ns := meshtest.NATS(t)
	nc := meshtest.Conn(t, ns)
	s, err := svc.NewServer(nc, svc.Config{Service: "errs", Codes: natsreg.Codes})
	if err != nil {
		t.Fatal(err)
	}
	sentinels := map[string]error{
		"not_found": registry.ErrNotFound, "invalid": registry.ErrInvalid,
		"reserved": registry.ErrReserved, "closed": registry.ErrClosed,
		"field_reserved": &registry.FieldError{Field: "tool_name", Msg: "x", Reserved: true},
	}
	for name, e := range sentinels {
		if err := s.Handle(name, func(context.Context, svc.Scope, []byte) (any, error) {
			return nil, fmt.Errorf("wrapped: %w", e)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	for name, e := range sentinels {
		subj, _ := svc.Subject(subjects.DefaultVersion, "p", "c", "errs", name)
		err := svc.Call(ctx, nc, subj, natsreg.Codes, struct{}{}, nil)
		want := []error{e}
		if name == "reserved" || name == "field_reserved" {
			want = []error{registry.ErrReserved, registry.ErrInvalid}
		}
		for _, w := range want {
			if !errors.Is(err, w) {
				t.Errorf("%s: %v does not match %v", name, err, w)
			}
		}
		if err == nil || err.Error() != "wrapped: "+e.Error() {
			t.Errorf("%s: message %v", name, err)
		}
	}
}

// TestWireJSON pins the bodies documented in doc.go.
func TestWireJSON(t *testing.T) {
	m := newBoltMesh(t)
	req := func(op, body string) (map[string]any, string) {
		t.Helper()
		msg, err := m.nc.Request(subject(t, "demo", op), []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		var v map[string]any
		if err := json.Unmarshal(msg.Data, &v); err != nil {
			t.Fatalf("%s reply %s: %v", op, msg.Data, err)
		}
		return v, string(msg.Data)
	}
	entry := `{"tool_name":"echo","description":"Echo the text back.",` +
		`"parameters":{"type":"object","properties":{"text":{"type":"string"}}},` +
		`"target_subject":"cg.{ver}.{project_id}.{channel_id}.cmd.tool.echo",` +
		`"after_execution":"suspend","options":{"timeout_seconds":10},"updated_at":"1999-01-01T00:00:00Z"}`
	v, raw := req("put", `{"entry":`+entry+`}`)
	e, _ := v["entry"].(map[string]any)
	if e == nil || e["project_id"] != "demo" || e["tool_name"] != "echo" || e["updated_at"] == "1999-01-01T00:00:00Z" || e["updated_at"] == nil {
		t.Errorf("put reply %s", raw)
	}
	t.Logf("put reply: %s", raw)
	v, raw = req("get", `{"tool_name":"echo"}`)
	if e, _ := v["entry"].(map[string]any); e == nil || e["tool_name"] != "echo" {
		t.Errorf("get reply %s", raw)
	}
	v, raw = req("list", `{}`)
	if l, _ := v["entries"].([]any); len(l) != 1 {
		t.Errorf("list reply %s", raw)
	}
	if _, raw = req("delete", `{"tool_name":"echo"}`); raw != `{}` {
		t.Errorf("delete reply %s", raw)
	}
	if _, raw = req("list", ``); raw != `{"entries":[]}` {
		t.Errorf("empty list reply %s", raw)
	}
	if _, raw = req("get", `{"tool_name":"echo"}`); raw != `{"error":{"code":"not_found","message":"registry: tool not found: project \"demo\" has no tool \"echo\""}}` {
		t.Errorf("not found reply %s", raw)
	}
	_, raw = req("put", `{"entry":{"tool_name":"list_tools"}}`)
	if raw != `{"error":{"code":"reserved","message":"registry: tool_name: \"list_tools\" is reserved for the built-in PMO tool","detail":{"field":"tool_name","reason":"\"list_tools\" is reserved for the built-in PMO tool"}}}` {
		t.Errorf("reserved reply %s", raw)
	}
	_, raw = req("put", `{"entry":{"project_id":"other","tool_name":"x"}}`)
	if !strings.Contains(raw, `"code":"bad_request"`) || !strings.Contains(raw, `"field":"project_id"`) {
		t.Errorf("other project reply %s", raw)
	}
	t.Logf("other project reply: %s", raw)
	// A FieldError from decoding options keeps its field.
	_, raw = req("put", `{"entry":{"tool_name":"x","options":{"args":{"default":{}}}}}`)
	if !strings.Contains(raw, `"code":"bad_request"`) || !strings.Contains(raw, `"field":"options.args"`) {
		t.Errorf("options decode reply %s", raw)
	}
	t.Logf("options decode reply: %s", raw)
	_, raw = req("put", `{nope`)
	if !strings.Contains(raw, `"code":"bad_request"`) {
		t.Errorf("malformed reply %s", raw)
	}
	_, raw = req("put", `{"entry":null}`)
	if !strings.Contains(raw, `"code":"bad_request"`) || !strings.Contains(raw, `"field":"entry"`) {
		t.Errorf("null entry reply %s", raw)
	}
}

func TestNewValidates(t *testing.T) {
	ns := meshtest.NATS(t)
	nc := meshtest.Conn(t, ns)
	if _, err := natsreg.NewServer(nc, nil, natsreg.ServerConfig{}); err == nil {
		t.Error("NewServer(nil registry): no error")
	}
	if _, err := natsreg.NewServer(nil, registry.NewMemory(nil), natsreg.ServerConfig{}); err == nil {
		t.Error("NewServer(nil conn): no error")
	}
	if _, err := natsreg.NewClient(nil); err == nil {
		t.Error("NewClient(nil): no error")
	}
	for _, o := range []svc.ClientOption{svc.WithVersion("a.b"), svc.WithChannel(""), svc.WithTimeout(0)} {
		if _, err := natsreg.NewClient(nc, o); err == nil {
			t.Error("NewClient with a bad option: no error")
		}
	}
}

func TestUnavailable(t *testing.T) {
	ns := meshtest.NATS(t)
	nc := meshtest.Conn(t, ns)
	c, err := natsreg.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.List(context.Background(), "proj"); !errors.Is(err, svc.ErrUnavailable) {
		t.Errorf("List without a server: err = %v, want svc.ErrUnavailable", err)
	}
}
