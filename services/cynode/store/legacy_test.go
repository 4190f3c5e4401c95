package store_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/utpmesh/utpmesh/services/cynode/store"
)

// testdata/cynode-v1.db was written by the cynode store before the state
// engine (commit 199ee1f: store.OpenBolt, PutProject, PutTask,
// UpdateTaskStatus, PutJob, UpdateJobStatus, CreateSetting, UpdateSetting,
// PutArtifact, PutSkill): projects demo and p2 (slug second), tasks
// demo-task and t2 (running), job demo-job (running), the system setting
// ui.theme at version 2 and the user setting lang, artifacts
// demo-task/out/report.md (version 2), t2/copy.md (the first version's
// content) and demo-task/empty.txt (empty), skills sk1 and sk2.
func copyFixture(t *testing.T, path string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "cynode-v1.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The file is imported once into either mode; its records and contents
// read as they did, writes go on from them, and a second import (the file
// copied back) adds nothing.
func TestImportLegacy(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := b.open(t).(*store.Engine)
			path := filepath.Join(t.TempDir(), store.LegacyFile)
			copyFixture(t, path)
			got, err := store.ImportLegacy(ctx, path, s)
			if err != nil {
				t.Fatal(err)
			}
			if want := (store.Imported{Projects: 2, Tasks: 2, Jobs: 1, Settings: 2, Artifacts: 3, Blobs: 2, Skills: 2}); got != want {
				t.Fatalf("imported %+v, want %+v", got, want)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatalf("cynode.db still there after the import: %v", err)
			}
			if _, err := os.Stat(path + store.ImportedSuffix); err != nil {
				t.Fatalf("cynode.db was not renamed: %v", err)
			}
			check(t, s)
			// Writes go on from the imported records.
			if a, err := s.PutArtifact(ctx, "demo-task", "out/report.md", []byte("v3"), at); err != nil || a.Version != 3 {
				t.Fatalf("put after import = %+v, %v; want version 3", a, err)
			}
			if st, err := s.UpdateSetting(ctx, store.SystemScope, store.Setting{Key: "ui.theme", Value: "blue"}, store.Write{ExpectedVersion: v(2), At: at}); err != nil || st.Version != 3 {
				t.Fatalf("setting update after import = %+v, %v", st, err)
			}
			if err := s.PutProject(ctx, store.Project{ID: "p3", Slug: "second"}); err == nil {
				t.Fatal("an imported slug was given to another project")
			}
			// Imported again (the file put back): nothing changes.
			copyFixture(t, path)
			again, err := store.ImportLegacy(ctx, path, s)
			if err != nil {
				t.Fatal(err)
			}
			if want := (store.Imported{Blobs: 2, Skipped: 14}); again != want {
				t.Fatalf("second import %+v, want %+v", again, want)
			}
			if a, _, err := s.GetArtifact(ctx, "demo-task", "out/report.md"); err != nil || a.Version != 3 {
				t.Fatalf("the second import changed an artifact: %+v, %v", a, err)
			}
			// No file: nothing to do.
			if none, err := store.ImportLegacy(ctx, filepath.Join(t.TempDir(), store.LegacyFile), s); err != nil || none != (store.Imported{}) {
				t.Fatalf("import of no file = %+v, %v", none, err)
			}
		})
	}
}

// check reads the fixture's records back.
func check(t *testing.T, s store.Store) {
	t.Helper()
	if p, err := s.GetProjectBySlug(ctx, "second"); err != nil || p.ID != "p2" {
		t.Fatalf("project by slug: %+v, %v", p, err)
	}
	if tk, err := s.GetTask(ctx, "t2"); err != nil || tk.Status != store.StatusRunning || tk.ProjectID != "p2" {
		t.Fatalf("task t2: %+v, %v", tk, err)
	}
	if tk, err := s.GetTask(ctx, "demo-task"); err != nil || tk.UserID != "demo-user" {
		t.Fatalf("task demo-task: %+v, %v", tk, err)
	}
	if j, err := s.GetJob(ctx, "demo-job"); err != nil || j.Status != store.StatusRunning {
		t.Fatalf("job: %+v, %v", j, err)
	}
	if st, err := s.GetSetting(ctx, store.SystemScope, "ui.theme"); err != nil || st.Version != 2 || st.Value != "light" || st.Reason != "v1 again" {
		t.Fatalf("system setting: %+v, %v", st, err)
	}
	prefs, _, err := s.ListSettings(ctx, store.Scope{Type: "user", ID: "demo-user"}, "", store.Page{Limit: 10})
	if err != nil || len(prefs) != 1 || prefs[0].Key != "lang" {
		t.Fatalf("user settings: %+v, %v", prefs, err)
	}
	for _, tc := range []struct{ task, path, content string }{
		{"demo-task", "out/report.md", "# Report\nv1 content, second version\n"},
		{"t2", "copy.md", "# Report\nv1 content\n"},
		{"demo-task", "empty.txt", ""},
	} {
		if _, c, err := s.GetArtifact(ctx, tc.task, tc.path); err != nil || string(c) != tc.content {
			t.Fatalf("artifact %s %s: %q, %v", tc.task, tc.path, c, err)
		}
	}
	arts, _, err := s.ListArtifacts(ctx, "demo-task", store.Page{Limit: 10})
	if err != nil || len(arts) != 2 || arts[0].Path != "empty.txt" || arts[1].Version != 2 {
		t.Fatalf("artifact list: %+v, %v", arts, err)
	}
	if sk, err := s.GetSkill(ctx, "sk1"); err != nil || sk.Content != "# Go style\nWrap errors with %w.\n" || sk.Owner != "demo-user" {
		t.Fatalf("skill sk1: %+v, %v", sk, err)
	}
	sks, _, err := s.ListSkills(ctx, nil, store.Page{Limit: 10})
	if err != nil || len(sks) != 2 || sks[1].ID != "sk2" || sks[1].Version != 2 || sks[1].Content != "" {
		t.Fatalf("skill list: %+v, %v", sks, err)
	}
}
