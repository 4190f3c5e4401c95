package cynodetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
	"github.com/utpmesh/utpmesh/services/cynode/store"
	"github.com/utpmesh/utpmesh/subjects"
)

// Direct runs the tools of one package straight on a gateway.Exec, with
// no mesh in between: the unit tests of the tool packages use it, over a
// real store of the engine's local mode in the test's temporary directory
// (its bbolt file checked with tx.Check when the test ends). The gateway's own rules (mandates,
// allowlists, policies, size limits, task scoping) are not applied;
// Harness tests them end to end.
type Direct struct {
	T      testing.TB
	Store  *store.Engine
	Config *gateway.Config
	// Project is the calling project (Project unless changed).
	Project string
	// Now is the clock of the calls.
	Now time.Time
	// Limits are the calls' limits (gateway.DefaultLimits unless changed).
	Limits gateway.Limits
	// Conn, when set, is the Exec's connection to the mesh.
	Conn func(ctx context.Context) (*nats.Conn, error)
	seq  *atomic.Int64
}

// NewDirect opens a store in a temporary directory; cfg nil is Config().
func NewDirect(t testing.TB, cfg *gateway.Config) *Direct {
	t.Helper()
	if cfg == nil {
		cfg = Config()
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "cynode-state.db")
	st, err := store.OpenLocal(path, filepath.Join(dir, "blobs"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
		CheckBolt(t, path)
	})
	return &Direct{T: t, Store: st, Config: cfg, Project: Project, Limits: gateway.DefaultLimits, seq: new(atomic.Int64),
		Now: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
}

// CheckBolt opens the closed bbolt file at path and runs tx.Check.
func CheckBolt(t testing.TB, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Errorf("reopen %s for its check: %v", path, err)
		return
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		var all []string
		for err := range tx.Check() {
			all = append(all, err.Error())
		}
		if len(all) > 0 {
			return errors.New(strings.Join(all, "; "))
		}
		return nil
	})
	if err != nil {
		t.Errorf("bbolt consistency check of %s: %v", path, err)
	}
}

// For returns d reporting to t (a subtest's): the same store,
// configuration and call numbering.
func (d *Direct) For(t testing.TB) *Direct {
	c := *d
	c.T = t
	return &c
}

// Seed stores the projects demo (slug demo) and p-shared (slug shared),
// tasks t1 (demo, user alice) and t-foreign (other), and jobs j1 (of t1)
// and j-foreign (of t-foreign).
func (d *Direct) Seed() {
	d.T.Helper()
	ctx := context.Background()
	for _, err := range []error{
		d.Store.PutProject(ctx, store.Project{ID: Project, Slug: "demo", DisplayName: "Demo"}),
		d.Store.PutProject(ctx, store.Project{ID: "p-shared", Slug: "shared", DisplayName: "Shared", Description: "alice's team"}),
		d.Store.PutProject(ctx, store.Project{ID: Other, Slug: "other"}),
		d.Store.PutTask(ctx, store.Task{ID: "t1", ProjectID: Project, Title: "first", UserID: "alice"}),
		d.Store.PutTask(ctx, store.Task{ID: "t-foreign", ProjectID: Other, Title: "theirs"}),
		d.Store.PutJob(ctx, store.Job{ID: "j1", TaskID: "t1"}),
		d.Store.PutJob(ctx, store.Job{ID: "j-foreign", TaskID: "t-foreign"}),
	} {
		if err != nil {
			d.T.Fatal(err)
		}
	}
}

// Spec returns the spec named name among specs.
func (d *Direct) Spec(specs []gateway.Spec, name string) gateway.Spec {
	d.T.Helper()
	for _, sp := range specs {
		if sp.Name == name {
			return sp
		}
	}
	d.T.Fatalf("no spec %s", name)
	return gateway.Spec{}
}

// Run runs sp as agentID (safe for concurrent use) (registered in Config) with args (a value
// encoded to JSON, or json.RawMessage as is). It returns the result
// decoded from JSON, or the error as the gateway would answer it.
func (d *Direct) Run(sp gateway.Spec, agentID string, args any) (any, *gateway.Error) {
	d.T.Helper()
	raw, ok := args.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(args); err != nil {
			d.T.Fatal(err)
		}
	}
	ag, ok := d.Config.Agents[agentID]
	if !ok {
		d.T.Fatalf("agent %s is not registered in the configuration", agentID)
	}
	var ids struct {
		TaskID string `json:"task_id"`
		RunID  string `json:"run_id"`
		JobID  string `json:"job_id"`
	}
	_ = json.Unmarshal(raw, &ids)
	seq := d.seq.Add(1)
	call := &worker.Call{Version: subjects.DefaultVersion, ProjectID: d.Project, ChannelID: "main", ToolName: sp.Name,
		Command: utp.Command{AgentID: agentID, AgentTurnID: "turn-" + agentID, ToolCallID: fmt.Sprintf("call-%d", seq)}, Arguments: raw}
	x := &gateway.Exec{Call: call, Identity: gateway.Identity{AgentID: agentID, Agent: ag}, Project: d.Project,
		TaskID: ids.TaskID, RunID: ids.RunID, JobID: ids.JobID, Args: raw, Now: d.Now, Limits: d.Limits,
		Store: d.Store, Config: d.Config, Conn: d.Conn}
	v, err := sp.Run(context.Background(), x)
	if err != nil {
		return nil, asError(err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		d.T.Fatalf("%s: result %v does not encode: %v", sp.Name, v, err)
	}
	var back any
	if err := json.Unmarshal(out, &back); err != nil {
		d.T.Fatal(err)
	}
	return back, nil
}

// OK is Run of a call that must succeed; it returns the result object.
func (d *Direct) OK(sp gateway.Spec, agentID string, args any) map[string]any {
	d.T.Helper()
	v, err := d.Run(sp, agentID, args)
	if err != nil {
		d.T.Fatalf("%s as %s (%s): %v", sp.Name, agentID, args, err)
	}
	m, _ := v.(map[string]any)
	return m
}

// Fail is Run of a call that must fail with error type typ and a message
// that says says; it returns the error.
func (d *Direct) Fail(sp gateway.Spec, agentID string, args any, typ, says string) *gateway.Error {
	d.T.Helper()
	v, err := d.Run(sp, agentID, args)
	switch {
	case err == nil:
		d.T.Fatalf("%s as %s (%s) = %v; want error %s", sp.Name, agentID, args, v, typ)
	case err.Type != typ || !strings.Contains(err.Message, says):
		d.T.Fatalf("%s as %s (%s): %s: %s; want %s saying %q", sp.Name, agentID, args, err.Type, err.Message, typ, says)
	}
	return err
}

// asError is the gateway's mapping of a tool's error to the response
// model's error (store sentinels to their types, the rest internal).
func asError(err error) *gateway.Error {
	var ge *gateway.Error
	if errors.As(err, &ge) {
		return ge
	}
	for _, m := range []struct {
		sentinel error
		typ      string
	}{{store.ErrNotFound, gateway.TypeNotFound}, {store.ErrExists, gateway.TypeAlreadyExists}, {store.ErrConflict, gateway.TypeConflict}, {store.ErrInvalid, gateway.TypeInvalidArgument}} {
		if errors.Is(err, m.sentinel) {
			return &gateway.Error{Type: m.typ, Message: strings.TrimPrefix(err.Error(), m.sentinel.Error()+": ")}
		}
	}
	return gateway.Errorf(gateway.TypeInternal, "%v", err)
}
