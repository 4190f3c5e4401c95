package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/services/cynode/store"
	"github.com/utpmesh/utpmesh/services/state/blob/objblob"
	"github.com/utpmesh/utpmesh/services/state/kvstate"
)

var (
	ctx = context.Background()
	at  = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
)

// backend opens a fresh Store of one mode of the state engine.
type backend struct {
	name string
	open func(t testing.TB) store.Store
}

// backends are the engine's modes: local (bbolt file and blob directory,
// the file checked with bbolt's tx.Check when the test ends) and
// JetStream (KV bucket and object store, R1, on a real nats-server).
var backends = []backend{
	{"local", func(t testing.TB) store.Store { return openLocal(t, t.TempDir()) }},
	{"jetstream", func(t testing.TB) store.Store {
		srv := meshtest.NATS(t)
		a, _ := openShared(t, meshtest.Conn(t, srv), meshtest.Conn(t, srv))
		return a
	}},
}

// each runs fn against every backend.
func each(t *testing.T, fn func(t *testing.T, s store.Store)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { fn(t, b.open(t)) })
	}
}

// openLocal opens the local mode in dir; when the test ends it is closed
// and its file checked.
func openLocal(t testing.TB, dir string) *store.Engine {
	t.Helper()
	path := filepath.Join(dir, "cynode-state.db")
	s, err := store.OpenLocal(path, filepath.Join(dir, "blobs"), 0)
	if err != nil {
		t.Fatalf("OpenLocal: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		checkFile(t, path)
	})
	return s
}

var buckets atomic.Int64

// openShared provisions a fresh KV bucket and object store and opens two
// engines on them, one per connection, as two workers do.
func openShared(t testing.TB, core *nats.Conn, more ...*nats.Conn) (*store.Engine, []*store.Engine) {
	t.Helper()
	n := buckets.Add(1)
	kcfg := kvstate.Config{Bucket: fmt.Sprintf("cynode_test%d", n)}
	bcfg := objblob.Config{Bucket: fmt.Sprintf("cynode_blobs_test%d", n)}
	if err := kvstate.Provision(ctx, core, kcfg); err != nil {
		t.Fatal(err)
	}
	if err := objblob.Provision(ctx, core, bcfg); err != nil {
		t.Fatal(err)
	}
	open := func(nc *nats.Conn) *store.Engine {
		st, err := kvstate.Open(ctx, nc, kcfg)
		if err != nil {
			t.Fatal(err)
		}
		bl, err := objblob.Open(ctx, nc, bcfg)
		if err != nil {
			t.Fatal(err)
		}
		return store.New(st, bl)
	}
	var others []*store.Engine
	for _, nc := range more {
		others = append(others, open(nc))
	}
	return open(core), others
}

// checkFile reopens the closed file with plain bbolt and runs tx.Check.
func checkFile(t testing.TB, path string) {
	t.Helper()
	withFile(t, path, func(tx *bolt.Tx) error {
		var first error
		for err := range tx.Check() {
			if first == nil {
				first = err
			}
		}
		return first
	})
}

// withFile runs fn in a read transaction of the closed file at path.
func withFile(t testing.TB, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatalf("reopen %s: %v", path, err)
	}
	defer db.Close()
	if err := db.View(fn); err != nil {
		t.Errorf("bbolt file %s: %v", path, err)
	}
}

// wantErr checks that err wraps want (nil: no error) and says says.
func wantErr(t *testing.T, what string, err, want error, says string) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Fatalf("%s: %v", what, err)
	case want != nil && !errors.Is(err, want):
		t.Fatalf("%s: error %v; want %v", what, err, want)
	case want != nil && !strings.Contains(err.Error(), says):
		t.Fatalf("%s: error %q does not say %q", what, err, says)
	}
}

func TestOpenRefusesSecondWriter(t *testing.T) {
	dir := t.TempDir()
	path, blobs := filepath.Join(dir, "cynode-state.db"), filepath.Join(dir, "blobs")
	s, err := store.OpenLocal(path, blobs, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutProject(ctx, store.Project{ID: "p1", Slug: "one"}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.OpenLocal(path, blobs, 0); err == nil || !strings.Contains(err.Error(), "another cynode process") {
		t.Fatalf("second open of a file in use: %v; want a refusal naming another cynode process", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened, the data is there.
	s, err = store.OpenLocal(path, blobs, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := s.GetProjectBySlug(ctx, "one"); err != nil || p.ID != "p1" {
		t.Fatalf("after reopen: %+v, %v", p, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkFile(t, path)
	if _, err := store.OpenLocal(filepath.Join(t.TempDir(), "missing", "dir", "cynode.db"), blobs, 0); err == nil {
		t.Fatal("open in a missing directory succeeded")
	}
}

func TestProjects(t *testing.T) {
	each(t, func(t *testing.T, s store.Store) {
		for _, tc := range []struct {
			name string
			p    store.Project
			want error
			says string
		}{
			{"first", store.Project{ID: "p1", Slug: "alpha", DisplayName: "Alpha"}, nil, ""},
			{"second", store.Project{ID: "p2", Slug: "beta", Description: "the Beta one"}, nil, ""},
			{"same project again", store.Project{ID: "p1", Slug: "alpha", DisplayName: "Alpha 2"}, nil, ""},
			{"no id", store.Project{Slug: "gamma"}, store.ErrInvalid, "project_id and slug"},
			{"no slug", store.Project{ID: "p3"}, store.ErrInvalid, "project_id and slug"},
			{"slug of another project", store.Project{ID: "p3", Slug: "beta"}, store.ErrExists, `slug "beta" is taken by project p2`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wantErr(t, "PutProject", s.PutProject(ctx, tc.p), tc.want, tc.says)
			})
		}
		if p, err := s.GetProject(ctx, "p1"); err != nil || p.DisplayName != "Alpha 2" {
			t.Fatalf("GetProject p1 = %+v, %v", p, err)
		}
		if p, err := s.GetProjectBySlug(ctx, "beta"); err != nil || p.ID != "p2" {
			t.Fatalf("GetProjectBySlug beta = %+v, %v", p, err)
		}
		_, err := s.GetProject(ctx, "p3")
		wantErr(t, "GetProject of a refused project", err, store.ErrNotFound, `no project "p3"`)
		_, err = s.GetProjectBySlug(ctx, "gamma")
		wantErr(t, "GetProjectBySlug of a refused project", err, store.ErrNotFound, `no project with slug "gamma"`)
	})
}

// A project that changes its slug gives up the old one: it is no longer
// found by it, and another project may take it.
func TestListProjects(t *testing.T) {
	each(t, func(t *testing.T, s store.Store) {
		for i := range 7 {
			p := store.Project{ID: fmt.Sprintf("p%d", i), Slug: fmt.Sprintf("s%d", i), DisplayName: fmt.Sprintf("Project %d", i)}
			if i%2 == 0 {
				p.Description = "has a GARDEN"
			}
			if err := s.PutProject(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		all := []string{"p0", "p1", "p2", "p3", "p4", "p5", "p6"}
		for _, tc := range []struct {
			name string
			ids  []string
			q    string
			want []string
		}{
			{"every id", all, "", all},
			{"only the allowed", []string{"p1", "p4", "nope"}, "", []string{"p1", "p4"}},
			{"none allowed", nil, "", nil},
			{"q in description, any case", all, "garden", []string{"p0", "p2", "p4", "p6"}},
			{"q in slug", all, "S3", []string{"p3"}},
			{"q and ids", []string{"p1", "p2"}, "garden", []string{"p2"}},
			{"q matching nothing", all, "zzz", nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				for _, limit := range []int{1, 2, 3, 100} {
					var got []string
					page := store.Page{Limit: limit}
					for pages := 0; ; pages++ {
						if pages > len(all)+1 {
							t.Fatalf("limit %d: the cursor does not end", limit)
						}
						ps, next, err := s.ListProjects(ctx, tc.ids, tc.q, page)
						if err != nil {
							t.Fatalf("limit %d: %v", limit, err)
						}
						if len(ps) > limit {
							t.Fatalf("limit %d: a page of %d", limit, len(ps))
						}
						for _, p := range ps {
							got = append(got, p.ID)
						}
						if next == "" {
							break
						}
						page.Cursor = next
					}
					if !slices.Equal(got, tc.want) {
						t.Fatalf("limit %d: %v; want %v", limit, got, tc.want)
					}
				}
			})
		}
	})
}

func TestTaskAndJobStatus(t *testing.T) {
	each(t, func(t *testing.T, s store.Store) {
		// Every (from, to) pair: the move is legal exactly when Transitions
		// lists it, for tasks and for jobs alike.
		for _, from := range store.Statuses {
			for _, to := range append(slices.Clone(store.Statuses), "done", "") {
				id := from + "-" + to
				if err := s.PutTask(ctx, store.Task{ID: id, ProjectID: "p", Status: from}); err != nil {
					t.Fatal(err)
				}
				if err := s.PutJob(ctx, store.Job{ID: id, TaskID: id, Status: from}); err != nil {
					t.Fatal(err)
				}
				legal := slices.Contains(store.Transitions[from], to)
				tb, ta, terr := s.UpdateTaskStatus(ctx, id, to, at)
				jb, ja, jerr := s.UpdateJobStatus(ctx, id, to, at)
				for _, r := range []struct {
					kind          string
					err           error
					before, after string
				}{{"task", terr, tb.Status, ta.Status}, {"job", jerr, jb.Status, ja.Status}} {
					switch {
					case legal && (r.err != nil || r.before != from || r.after != to):
						t.Errorf("%s %s → %s: before %q after %q, %v; want legal", r.kind, from, to, r.before, r.after, r.err)
					case !legal && !errors.Is(r.err, store.ErrInvalid):
						t.Errorf("%s %s → %s: %v; want ErrInvalid", r.kind, from, to, r.err)
					case !legal && !slices.Contains(store.Statuses, to) && !strings.Contains(r.err.Error(), "is not one of pending, running"):
						t.Errorf("%s %s → %q: %q does not list the statuses", r.kind, from, to, r.err)
					case !legal && store.Terminal(from) && slices.Contains(store.Statuses, to) && !strings.Contains(r.err.Error(), "it is terminal"):
						t.Errorf("%s %s → %s: %q does not say terminal", r.kind, from, to, r.err)
					}
				}
				// What is stored is the answer's after (or the unchanged task).
				want := from
				if legal {
					want = to
				}
				if got, err := s.GetTask(ctx, id); err != nil || got.Status != want || (legal && !got.UpdatedAt.Equal(at)) {
					t.Errorf("task %s stored as %+v, %v; want status %s", id, got, err, want)
				}
				if got, err := s.GetJob(ctx, id); err != nil || got.Status != want {
					t.Errorf("job %s stored as %+v, %v; want status %s", id, got, err, want)
				}
			}
		}
	})
}

func TestTasksAndJobs(t *testing.T) {
	each(t, func(t *testing.T, s store.Store) {
		for _, tc := range []struct {
			name string
			put  func() error
			want error
			says string
		}{
			{"task", func() error { return s.PutTask(ctx, store.Task{ID: "t1", ProjectID: "p", Title: "x", UserID: "alice"}) }, nil, ""},
			{"task without id", func() error { return s.PutTask(ctx, store.Task{ProjectID: "p"}) }, store.ErrInvalid, "task_id and project_id"},
			{"task without project", func() error { return s.PutTask(ctx, store.Task{ID: "t2"}) }, store.ErrInvalid, "task_id and project_id"},
			{"job", func() error { return s.PutJob(ctx, store.Job{ID: "j1", TaskID: "t1"}) }, nil, ""},
			{"job without id", func() error { return s.PutJob(ctx, store.Job{TaskID: "t1"}) }, store.ErrInvalid, "job_id and task_id"},
			{"job without task", func() error { return s.PutJob(ctx, store.Job{ID: "j2"}) }, store.ErrInvalid, "job_id and task_id"},
		} {
			t.Run(tc.name, func(t *testing.T) { wantErr(t, tc.name, tc.put(), tc.want, tc.says) })
		}
		// Defaults: pending, and a time.
		task, err := s.GetTask(ctx, "t1")
		if err != nil || task.Status != store.StatusPending || task.UpdatedAt.IsZero() || task.UserID != "alice" {
			t.Fatalf("task = %+v, %v", task, err)
		}
		job, err := s.GetJob(ctx, "j1")
		if err != nil || job.Status != store.StatusPending || job.UpdatedAt.IsZero() {
			t.Fatalf("job = %+v, %v", job, err)
		}
		for _, tc := range []struct {
			name string
			err  error
			says string
		}{
			{"get task", func() error { _, err := s.GetTask(ctx, "t2"); return err }(), `no task "t2"`},
			{"get job", func() error { _, err := s.GetJob(ctx, "j2"); return err }(), `no job "j2"`},
			{"update task", func() error { _, _, err := s.UpdateTaskStatus(ctx, "t2", "running", at); return err }(), `no task "t2"`},
			{"update job", func() error { _, _, err := s.UpdateJobStatus(ctx, "j2", "running", at); return err }(), `no job "j2"`},
		} {
			wantErr(t, tc.name, tc.err, store.ErrNotFound, tc.says)
		}
	})
}

func TestTaskHook(t *testing.T) {
	each(t, func(t *testing.T, s store.Store) {
		var seen []string
		h := store.WithTaskHook(s, func(_ context.Context, t store.Task) { seen = append(seen, t.ID+":"+t.Status) })
		steps := []struct {
			name string
			do   func() error
			want []string
		}{
			{"put pending", func() error { return h.PutTask(ctx, store.Task{ID: "t1", ProjectID: "p"}) }, nil},
			{"put terminal", func() error {
				return h.PutTask(ctx, store.Task{ID: "t2", ProjectID: "p", Status: store.StatusCanceled})
			}, []string{"t2:canceled"}},
			{"refused put", func() error { return h.PutTask(ctx, store.Task{ID: "t3", Status: store.StatusFailed}) }, nil},
			{"to running", func() error { _, _, err := h.UpdateTaskStatus(ctx, "t1", "running", at); return err }, nil},
			{"to completed", func() error { _, _, err := h.UpdateTaskStatus(ctx, "t1", "completed", at); return err }, []string{"t1:completed"}},
			{"refused update", func() error { _, _, err := h.UpdateTaskStatus(ctx, "t1", "failed", at); return err }, nil},
		}
		for _, st := range steps {
			seen = nil
			_ = st.do()
			if !slices.Equal(seen, st.want) {
				t.Errorf("%s: hook saw %v; want %v", st.name, seen, st.want)
			}
		}
		for _, st := range store.Statuses {
			if want := slices.Contains([]string{"completed", "failed", "canceled"}, st); store.Terminal(st) != want {
				t.Errorf("Terminal(%s) = %v", st, !want)
			}
		}
	})
}

func v(n int64) *int64 { return &n }

func TestSettings(t *testing.T) {
	each(t, func(t *testing.T, s store.Store) {
		sys, proj, user := store.SystemScope, store.Scope{Type: "project", ID: "p1"}, store.Scope{Type: "user", ID: "alice"}
		w := func(exp *int64) store.Write {
			return store.Write{ExpectedVersion: exp, Reason: "why", By: "pm", At: at}
		}
		type step struct {
			name    string
			do      func() (store.Setting, error)
			want    error
			says    string
			version int64
		}
		create := func(sc store.Scope, key string, val any) func() (store.Setting, error) {
			return func() (store.Setting, error) {
				return s.CreateSetting(ctx, sc, store.Setting{Key: key, Value: val, ValueType: "json"}, w(nil))
			}
		}
		update := func(sc store.Scope, key string, val any, exp *int64) func() (store.Setting, error) {
			return func() (store.Setting, error) {
				return s.UpdateSetting(ctx, sc, store.Setting{Key: key, Value: val, ValueType: "json"}, w(exp))
			}
		}
		del := func(sc store.Scope, key string, exp *int64) func() (store.Setting, error) {
			return func() (store.Setting, error) { return s.DeleteSetting(ctx, sc, key, w(exp)) }
		}
		get := func(sc store.Scope, key string) func() (store.Setting, error) {
			return func() (store.Setting, error) { return s.GetSetting(ctx, sc, key) }
		}
		for _, st := range []step{
			{"create", create(sys, "model", "small"), nil, "", 1},
			{"same key in another scope", create(proj, "model", "medium"), nil, "", 1},
			{"and another", create(user, "model", "large"), nil, "", 1},
			{"create twice", create(sys, "model", "x"), store.ErrExists, `setting "model" exists; use update`, 0},
			{"create twice, scoped", create(proj, "model", "x"), store.ErrExists, `"model" (scope project p1) exists`, 0},
			{"update", update(sys, "model", "tiny", nil), nil, "", 2},
			{"update at the version", update(sys, "model", "tiny2", v(2)), nil, "", 3},
			{"update at another version", update(sys, "model", "x", v(2)), store.ErrConflict, "at version 3, the call expected 2; read it again and retry with expected_version 3", 0},
			{"update of a missing key", update(sys, "nope", 1, nil), store.ErrNotFound, `no setting "nope"; use create first`, 0},
			{"get", get(sys, "model"), nil, "", 3},
			{"get scoped", get(user, "model"), nil, "", 1},
			{"get missing", get(store.Scope{Type: "user", ID: "bob"}, "model"), store.ErrNotFound, `"model" (scope user bob)`, 0},
			{"delete at another version", del(proj, "model", v(5)), store.ErrConflict, "at version 1, the call expected 5", 0},
			{"delete", del(proj, "model", v(1)), nil, "", 1},
			{"delete again", del(proj, "model", nil), store.ErrNotFound, `no setting "model" (scope project p1)`, 0},
			{"deleted", get(proj, "model"), store.ErrNotFound, "", 0},
			{"create after delete starts over", create(proj, "model", "again"), nil, "", 1},
		} {
			got, err := st.do()
			wantErr(t, st.name, err, st.want, st.says)
			if st.want == nil && got.Version != st.version {
				t.Fatalf("%s: version %d; want %d (%+v)", st.name, got.Version, st.version, got)
			}
		}
		got, err := s.GetSetting(ctx, sys, "model")
		if err != nil || got.Value != "tiny2" || got.Reason != "why" || got.UpdatedBy != "pm" || !got.UpdatedAt.Equal(at) || got.ValueType != "json" {
			t.Fatalf("stored = %+v, %v", got, err)
		}
	})
}

func TestListSettings(t *testing.T) {
	each(t, func(t *testing.T, s store.Store) {
		scopes := []store.Scope{store.SystemScope, {Type: "project", ID: "p1"}, {Type: "project", ID: "p10"}, {Type: "task", ID: "p1"}}
		keys := []string{"a.1", "a.2", "a.3", "b.1", "b.2"}
		for _, sc := range scopes {
			for _, k := range keys {
				if _, err := s.CreateSetting(ctx, sc, store.Setting{Key: k, Value: sc.Type + sc.ID, ValueType: "string"}, store.Write{At: at}); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, sc := range scopes {
			for _, tc := range []struct {
				prefix string
				want   []string
			}{{"", keys}, {"a.", keys[:3]}, {"b.", keys[3:]}, {"c", nil}, {"a.2", []string{"a.2"}}} {
				for _, limit := range []int{1, 2, 10} {
					var got []string
					page := store.Page{Limit: limit}
					for range 10 {
						items, next, err := s.ListSettings(ctx, sc, tc.prefix, page)
						if err != nil {
							t.Fatalf("%v %q limit %d: %v", sc, tc.prefix, limit, err)
						}
						for _, it := range items {
							if it.Value != sc.Type+sc.ID {
								t.Fatalf("%v lists %+v of another scope", sc, it)
							}
							got = append(got, it.Key)
						}
						if next == "" {
							break
						}
						page.Cursor = next
					}
					if !slices.Equal(got, tc.want) {
						t.Fatalf("%v %q limit %d: %v; want %v", sc, tc.prefix, limit, got, tc.want)
					}
				}
			}
		}
		// A cursor is the list's own.
		_, next, err := s.ListSettings(ctx, scopes[1], "a.", store.Page{Limit: 1})
		if err != nil || next == "" {
			t.Fatalf("first page: %q, %v", next, err)
		}
		for _, tc := range []struct {
			name   string
			sc     store.Scope
			prefix string
			cursor string
			says   string
		}{
			{"another scope", scopes[2], "a.", next, "belongs to another list"},
			{"another prefix", scopes[1], "b.", next, "belongs to another list"},
			{"not base64", scopes[1], "a.", "%%%", "is not one this server returned"},
		} {
			_, _, err := s.ListSettings(ctx, tc.sc, tc.prefix, store.Page{Limit: 1, Cursor: tc.cursor})
			wantErr(t, tc.name, err, store.ErrInvalid, tc.says)
		}
	})
}

// A page needs a positive limit: a list never answers an empty last page
// for a limit it cannot honour.
func TestArtifacts(t *testing.T) {
	each(t, func(t *testing.T, s store.Store) {
		for _, st := range []struct {
			task, path, content string
			version             int64
		}{
			{"t1", "out/a.md", "alpha", 1},
			{"t1", "out/a.md", "alpha 2", 2},
			{"t1", "out/a.md", "alpha", 3},
			{"t1", "b.txt", "alpha", 1}, // same content, another path: one blob
			{"t1", "empty", "", 1},
			{"t10", "out/a.md", "ten", 1},
			{"t2", "c", "alpha", 1},
		} {
			a, err := s.PutArtifact(ctx, st.task, st.path, []byte(st.content), at.In(time.FixedZone("X", 3600)))
			if err != nil {
				t.Fatalf("put %s %s: %v", st.task, st.path, err)
			}
			if a.Version != st.version || a.Size != int64(len(st.content)) || len(a.SHA256) != 64 || a.UpdatedAt.Location() != time.UTC {
				t.Fatalf("put %s %s = %+v; want version %d", st.task, st.path, a, st.version)
			}
			got, content, err := s.GetArtifact(ctx, st.task, st.path)
			if err != nil || string(content) != st.content || got != a {
				t.Fatalf("get %s %s = %+v %q, %v; want %+v %q", st.task, st.path, got, content, err, a, st.content)
			}
		}
		_, _, err := s.GetArtifact(ctx, "t1", "nope")
		wantErr(t, "get missing", err, store.ErrNotFound, `task t1 has no artifact at "nope"`)
		for _, tc := range []struct {
			task string
			want []string
		}{{"t1", []string{"b.txt", "empty", "out/a.md"}}, {"t10", []string{"out/a.md"}}, {"t3", nil}} {
			var got []string
			page := store.Page{Limit: 1}
			for range 10 {
				arts, next, err := s.ListArtifacts(ctx, tc.task, page)
				if err != nil {
					t.Fatal(err)
				}
				for _, a := range arts {
					if a.TaskID != tc.task {
						t.Fatalf("list %s has %+v", tc.task, a)
					}
					got = append(got, a.Path)
				}
				if next == "" {
					break
				}
				page.Cursor = next
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("list %s = %v; want %v", tc.task, got, tc.want)
			}
		}
		_, next, _ := s.ListArtifacts(ctx, "t1", store.Page{Limit: 1})
		_, _, err = s.ListArtifacts(ctx, "t2", store.Page{Limit: 1, Cursor: next})
		wantErr(t, "cursor of another task", err, store.ErrInvalid, "another list")
	})
}

// Each content is stored once, whatever the number of paths and versions
// that hold it.
func TestArtifactBlobsStoredOnce(t *testing.T) {
	dir := t.TempDir()
	s := openLocal(t, dir)
	for i := range 6 {
		if _, err := s.PutArtifact(ctx, fmt.Sprintf("t%d", i%2), fmt.Sprintf("p%d", i%3), []byte(fmt.Sprintf("content %d", i%2)), at); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(filepath.Join(dir, "blobs"))
	if err != nil || len(ents) != 2 {
		t.Fatalf("blob directory holds %v (%v); want 2 blobs", ents, err)
	}
}

// Artifacts are named by a task and a path: an empty one, or a task id
// holding the key separator, is refused rather than stored under a key
// another task's list would show.
// Settings are keyed by scope and key: a NUL in either is refused, so no
// scope's key can read as another scope's.
func TestSkills(t *testing.T) {
	each(t, func(t *testing.T, s store.Store) {
		wantErr(t, "no id", s.PutSkill(ctx, store.Skill{Name: "x"}), store.ErrInvalid, "skill_id")
		for i := range 5 {
			sk := store.Skill{ID: fmt.Sprintf("s%d", i), Name: fmt.Sprintf("n%d", i), Scope: "user", Owner: []string{"alice", "bob"}[i%2], Content: "c", Version: 1}
			if err := s.PutSkill(ctx, sk); err != nil {
				t.Fatal(err)
			}
		}
		if sk, err := s.GetSkill(ctx, "s3"); err != nil || sk.Owner != "bob" || sk.Content != "c" {
			t.Fatalf("get = %+v, %v", sk, err)
		}
		alice := func(sk store.Skill) bool { return sk.Owner == "alice" }
		for _, tc := range []struct {
			name    string
			visible func(store.Skill) bool
			want    []string
		}{
			{"alice's", alice, []string{"s0", "s2", "s4"}},
			{"none", func(store.Skill) bool { return false }, nil},
			{"every skill (nil)", nil, []string{"s0", "s1", "s2", "s3", "s4"}},
		} {
			var got []string
			page := store.Page{Limit: 2}
			for range 10 {
				sks, next, err := s.ListSkills(ctx, tc.visible, page)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				for _, sk := range sks {
					got = append(got, sk.ID)
				}
				if next == "" {
					break
				}
				page.Cursor = next
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("%s: %v; want %v", tc.name, got, tc.want)
			}
		}
		if err := s.DeleteSkill(ctx, "s0"); err != nil {
			t.Fatal(err)
		}
		wantErr(t, "delete again", s.DeleteSkill(ctx, "s0"), store.ErrNotFound, `no skill "s0"`)
		_, err := s.GetSkill(ctx, "s0")
		wantErr(t, "get deleted", err, store.ErrNotFound, `no skill "s0"`)
	})
}

// The store is safe for concurrent use: concurrent compare-and-set
// updates of one setting let exactly one writer win each version,
// concurrent puts of one artifact get distinct versions, and of
// concurrent moves of one task from pending to running exactly one
// succeeds.
func TestConcurrentWriters(t *testing.T) {
	each(t, func(t *testing.T, s store.Store) {
		const n = 8
		sc := store.SystemScope
		if _, err := s.CreateSetting(ctx, sc, store.Setting{Key: "k", Value: 0}, store.Write{At: at}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutTask(ctx, store.Task{ID: "t1", ProjectID: "p"}); err != nil {
			t.Fatal(err)
		}
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			wins      = map[int64]int{}
			conflicts int
			versions  []int64
			moved     int
			refused   int
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := s.UpdateSetting(ctx, sc, store.Setting{Key: "k", Value: i}, store.Write{ExpectedVersion: v(1), At: at})
				a, aerr := s.PutArtifact(ctx, "t1", "same", []byte(fmt.Sprint(i)), at)
				_, _, terr := s.UpdateTaskStatus(ctx, "t1", store.StatusRunning, at)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins[got.Version]++
				case errors.Is(err, store.ErrConflict):
					conflicts++
				default:
					t.Errorf("update: %v", err)
				}
				if aerr != nil {
					t.Errorf("put artifact: %v", aerr)
				}
				versions = append(versions, a.Version)
				switch {
				case terr == nil:
					moved++
				case errors.Is(terr, store.ErrInvalid):
					refused++
				default:
					t.Errorf("update task: %v", terr)
				}
			}()
		}
		wg.Wait()
		if wins[2] != 1 || len(wins) != 1 || conflicts != n-1 {
			t.Errorf("compare-and-set: wins %v, conflicts %d; want one win at version 2 and %d conflicts", wins, conflicts, n-1)
		}
		slices.Sort(versions)
		for i, got := range versions {
			if got != int64(i+1) {
				t.Fatalf("artifact versions %v; want 1..%d", versions, n)
			}
		}
		if moved != 1 || refused != n-1 {
			t.Errorf("task moves: %d succeeded, %d refused; want 1 and %d", moved, refused, n-1)
		}
	})
}
