package store

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/state/blob"
)

// Engine is the Store over the tool services' state engine: the records in
// a state.Store (kvstate: the JetStream KV bucket every worker of the
// service shares; boltstate: a local file), the contents of artifacts and
// the bodies of skills in a blob.Store (objblob: a JetStream object
// store; dirblob: a local directory).
//
// # Layout
//
// The engine's projects partition the records, so that writers of
// unrelated records never conflict (a kvstate transaction is serialized
// per project); each record is the JSON of its type:
//
//	project "projects"            buckets "projects" (id), "project_slugs" (slug → id)
//	project "task\x00<id>"        bucket "tasks" (id)
//	project "job\x00<id>"         bucket "jobs" (id)
//	project "settings\x00<scope>" bucket "settings" (<type>\x00<id>\x00<key>)
//	project "artifacts\x00<task>" bucket "artifacts" (<task>\x00<path>)
//	project "skills"              bucket "skills" (id)
//
// An artifact's content is the blob "artifact-<sha256>", shared by every
// artifact with that content and never deleted (no tool deletes an
// artifact). A skill's body is a blob of its own, "skill-<random>", named
// in its record: an update writes a new one and deletes the old one once
// the record points at the new one, and a delete deletes it, so no blob a
// record points at is ever deleted.
type Engine struct {
	st    state.Store
	blobs blob.Store
}

var _ Store = (*Engine)(nil)

// New returns the Store over st and blobs; Close closes both.
func New(st state.Store, blobs blob.Store) *Engine { return &Engine{st: st, blobs: blobs} }

// State and Blobs are the engine's stores (tests, the import).
func (e *Engine) State() state.Store { return e.st }

// Blobs is the engine's blob store.
func (e *Engine) Blobs() blob.Store { return e.blobs }

// Close closes the blob store and the state.
func (e *Engine) Close() error {
	return errors.Join(e.blobs.Close(), e.st.Close())
}

// Projects and buckets of the engine (see the Engine doc).
const (
	partProjects = "projects"
	partSkills   = "skills"

	bucketProjects  = "projects"
	bucketSlugs     = "project_slugs"
	bucketTasks     = "tasks"
	bucketJobs      = "jobs"
	bucketSettings  = "settings"
	bucketArtifacts = "artifacts"
	bucketSkills    = "skills"
)

func taskPart(id string) string          { return "task\x00" + id }
func jobPart(id string) string           { return "job\x00" + id }
func settingsPart(sc Scope) string       { return "settings\x00" + sc.Type + "\x00" + sc.ID }
func artifactsPart(taskID string) string { return "artifacts\x00" + taskID }

// ArtifactBlob is the blob name of an artifact content of SHA-256 sum
// (hex).
func ArtifactBlob(sum string) string { return "artifact-" + sum }

// skillRecord is a stored skill: its body is the blob Body (Content is
// empty), or, in a record no import rewrote, Content itself.
type skillRecord struct {
	Skill
	Body string `json:"body_blob,omitempty"`
}

func getJSON(b state.Bucket, key string, v any) (bool, error) {
	raw, found, err := b.Get(key)
	if err != nil || !found {
		return false, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("cynode store: record %q is not readable: %w", key, err)
	}
	return true, nil
}

func putJSON(b state.Bucket, key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, raw)
}

// scanPage walks the keys of b with prefix after the cursor, calling take
// for each until it has limit accepted items; it returns the next cursor
// ("" at the end). take may run again for the same keys when the
// transaction's closure is run again: callers reset what they collect at
// the start of the closure.
func scanPage(b state.Bucket, prefix string, page Page, take func(k string, v []byte) (bool, error)) (string, error) {
	if page.Limit < 1 {
		return "", fmt.Errorf("%w: page limit %d is out of range; pass a limit of 1 or more", ErrInvalid, page.Limit)
	}
	raw, err := decodeCursor(page.Cursor)
	if err != nil {
		return "", err
	}
	after := string(raw)
	if raw != nil && !strings.HasPrefix(after, prefix) {
		return "", fmt.Errorf("%w: the cursor belongs to another list; pass the next_cursor of this list's previous page", ErrInvalid)
	}
	n, last, next := 0, "", ""
	err = b.Scan(prefix, false, func(k string, v []byte) error {
		if raw != nil && k <= after {
			return nil
		}
		if n == page.Limit {
			next = EncodeCursor([]byte(last))
			return state.ErrStop
		}
		ok, err := take(k, v)
		if err != nil {
			return err
		}
		if ok {
			n++
			last = k
		}
		return nil
	})
	return next, err
}

// PutProject implements Store.
func (e *Engine) PutProject(ctx context.Context, p Project) error {
	if p.ID == "" || p.Slug == "" {
		return fmt.Errorf("%w: a project needs project_id and slug", ErrInvalid)
	}
	return e.st.Update(ctx, func(tx state.Tx) error {
		slugs, projects := tx.Bucket(partProjects, bucketSlugs), tx.Bucket(partProjects, bucketProjects)
		id, found, err := slugs.Get(p.Slug)
		if err != nil {
			return err
		}
		if found && string(id) != p.ID {
			return fmt.Errorf("%w: slug %q is taken by project %s", ErrExists, p.Slug, id)
		}
		// A project that changes its slug gives the old one up.
		var prev Project
		if ok, err := getJSON(projects, p.ID, &prev); err != nil {
			return err
		} else if ok && prev.Slug != p.Slug {
			if err := slugs.Delete(prev.Slug); err != nil {
				return err
			}
		}
		if err := slugs.Put(p.Slug, []byte(p.ID)); err != nil {
			return err
		}
		return putJSON(projects, p.ID, p)
	})
}

// GetProject implements Store.
func (e *Engine) GetProject(ctx context.Context, id string) (Project, error) {
	var p Project
	err := e.st.View(ctx, func(tx state.Tx) error {
		ok, err := getJSON(tx.Bucket(partProjects, bucketProjects), id, &p)
		if err == nil && !ok {
			err = fmt.Errorf("%w: no project %q", ErrNotFound, id)
		}
		return err
	})
	return p, err
}

// GetProjectBySlug implements Store.
func (e *Engine) GetProjectBySlug(ctx context.Context, slug string) (Project, error) {
	var p Project
	err := e.st.View(ctx, func(tx state.Tx) error {
		id, found, err := tx.Bucket(partProjects, bucketSlugs).Get(slug)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("%w: no project with slug %q", ErrNotFound, slug)
		}
		ok, err := getJSON(tx.Bucket(partProjects, bucketProjects), string(id), &p)
		if err == nil && !ok {
			err = fmt.Errorf("%w: no project %q", ErrNotFound, id)
		}
		return err
	})
	return p, err
}

// ListProjects implements Store.
func (e *Engine) ListProjects(ctx context.Context, ids []string, q string, page Page) ([]Project, string, error) {
	allowed := map[string]bool{}
	for _, id := range ids {
		allowed[id] = true
	}
	q = strings.ToLower(q)
	var out []Project
	var next string
	err := e.st.View(ctx, func(tx state.Tx) error {
		out = nil
		var err error
		next, err = scanPage(tx.Bucket(partProjects, bucketProjects), "", page, func(k string, v []byte) (bool, error) {
			if !allowed[k] {
				return false, nil
			}
			var p Project
			if err := json.Unmarshal(v, &p); err != nil {
				return false, err
			}
			if q != "" && !strings.Contains(strings.ToLower(p.Slug+"\x00"+p.DisplayName+"\x00"+p.Description), q) {
				return false, nil
			}
			out = append(out, p)
			return true, nil
		})
		return err
	})
	return out, next, err
}

// PutTask implements Store.
func (e *Engine) PutTask(ctx context.Context, t Task) error {
	if t.ID == "" || t.ProjectID == "" {
		return fmt.Errorf("%w: a task needs task_id and project_id", ErrInvalid)
	}
	if t.Status == "" {
		t.Status = StatusPending
	}
	if t.UpdatedAt.IsZero() {
		t.UpdatedAt = time.Now().UTC()
	}
	return e.st.Update(ctx, func(tx state.Tx) error { return putJSON(tx.Bucket(taskPart(t.ID), bucketTasks), t.ID, t) })
}

// GetTask implements Store.
func (e *Engine) GetTask(ctx context.Context, id string) (Task, error) {
	var t Task
	err := e.st.View(ctx, func(tx state.Tx) error {
		ok, err := getJSON(tx.Bucket(taskPart(id), bucketTasks), id, &t)
		if err == nil && !ok {
			err = fmt.Errorf("%w: no task %q", ErrNotFound, id)
		}
		return err
	})
	return t, err
}

// UpdateTaskStatus implements Store.
func (e *Engine) UpdateTaskStatus(ctx context.Context, id, status string, at time.Time) (before, after Task, err error) {
	err = e.st.Update(ctx, func(tx state.Tx) error {
		b := tx.Bucket(taskPart(id), bucketTasks)
		before = Task{}
		ok, err := getJSON(b, id, &before)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: no task %q", ErrNotFound, id)
		}
		if err := CheckTransition("task", id, before.Status, status); err != nil {
			return err
		}
		after = before
		after.Status, after.UpdatedAt = status, at.UTC()
		return putJSON(b, id, after)
	})
	return before, after, err
}

// PutJob implements Store.
func (e *Engine) PutJob(ctx context.Context, j Job) error {
	if j.ID == "" || j.TaskID == "" {
		return fmt.Errorf("%w: a job needs job_id and task_id", ErrInvalid)
	}
	if j.Status == "" {
		j.Status = StatusPending
	}
	if j.UpdatedAt.IsZero() {
		j.UpdatedAt = time.Now().UTC()
	}
	return e.st.Update(ctx, func(tx state.Tx) error { return putJSON(tx.Bucket(jobPart(j.ID), bucketJobs), j.ID, j) })
}

// GetJob implements Store.
func (e *Engine) GetJob(ctx context.Context, id string) (Job, error) {
	var j Job
	err := e.st.View(ctx, func(tx state.Tx) error {
		ok, err := getJSON(tx.Bucket(jobPart(id), bucketJobs), id, &j)
		if err == nil && !ok {
			err = fmt.Errorf("%w: no job %q", ErrNotFound, id)
		}
		return err
	})
	return j, err
}

// UpdateJobStatus implements Store.
func (e *Engine) UpdateJobStatus(ctx context.Context, id, status string, at time.Time) (before, after Job, err error) {
	err = e.st.Update(ctx, func(tx state.Tx) error {
		b := tx.Bucket(jobPart(id), bucketJobs)
		before = Job{}
		ok, err := getJSON(b, id, &before)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: no job %q", ErrNotFound, id)
		}
		if err := CheckTransition("job", id, before.Status, status); err != nil {
			return err
		}
		after = before
		after.Status, after.UpdatedAt = status, at.UTC()
		return putJSON(b, id, after)
	})
	return before, after, err
}

// GetSetting implements Store.
func (e *Engine) GetSetting(ctx context.Context, sc Scope, key string) (Setting, error) {
	var st Setting
	err := e.st.View(ctx, func(tx state.Tx) error {
		ok, err := getJSON(tx.Bucket(settingsPart(sc), bucketSettings), settingKey(sc, key), &st)
		if err == nil && !ok {
			err = fmt.Errorf("%w: no setting %s", ErrNotFound, describe(sc, key))
		}
		return err
	})
	return st, err
}

// ListSettings implements Store.
func (e *Engine) ListSettings(ctx context.Context, sc Scope, keyPrefix string, page Page) ([]Setting, string, error) {
	var out []Setting
	var next string
	err := e.st.View(ctx, func(tx state.Tx) error {
		out = nil
		var err error
		next, err = scanPage(tx.Bucket(settingsPart(sc), bucketSettings), scopePrefix(sc)+keyPrefix, page, func(_ string, v []byte) (bool, error) {
			var st Setting
			if err := json.Unmarshal(v, &st); err != nil {
				return false, err
			}
			out = append(out, st)
			return true, nil
		})
		return err
	})
	return out, next, err
}

// CreateSetting implements Store.
func (e *Engine) CreateSetting(ctx context.Context, sc Scope, st Setting, w Write) (Setting, error) {
	if err := checkSettingKey(sc, st.Key); err != nil {
		return Setting{}, err
	}
	st.Version, st.Reason, st.UpdatedAt, st.UpdatedBy = 1, w.Reason, w.At.UTC(), w.By
	err := e.st.Update(ctx, func(tx state.Tx) error {
		b := tx.Bucket(settingsPart(sc), bucketSettings)
		k := settingKey(sc, st.Key)
		if _, found, err := b.Get(k); err != nil {
			return err
		} else if found {
			return fmt.Errorf("%w: setting %s exists; use update (with expected_version) to change it", ErrExists, describe(sc, st.Key))
		}
		return putJSON(b, k, st)
	})
	if err != nil {
		return Setting{}, err
	}
	return st, nil
}

// UpdateSetting implements Store.
func (e *Engine) UpdateSetting(ctx context.Context, sc Scope, st Setting, w Write) (Setting, error) {
	if err := checkSettingKey(sc, st.Key); err != nil {
		return Setting{}, err
	}
	err := e.st.Update(ctx, func(tx state.Tx) error {
		b := tx.Bucket(settingsPart(sc), bucketSettings)
		k := settingKey(sc, st.Key)
		var cur Setting
		ok, err := getJSON(b, k, &cur)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: no setting %s; use create first", ErrNotFound, describe(sc, st.Key))
		}
		if err := checkVersion(sc, cur, w); err != nil {
			return err
		}
		st.Version, st.Reason, st.UpdatedAt, st.UpdatedBy = cur.Version+1, w.Reason, w.At.UTC(), w.By
		return putJSON(b, k, st)
	})
	if err != nil {
		return Setting{}, err
	}
	return st, nil
}

// DeleteSetting implements Store.
func (e *Engine) DeleteSetting(ctx context.Context, sc Scope, key string, w Write) (Setting, error) {
	var cur Setting
	err := e.st.Update(ctx, func(tx state.Tx) error {
		b := tx.Bucket(settingsPart(sc), bucketSettings)
		k := settingKey(sc, key)
		cur = Setting{}
		ok, err := getJSON(b, k, &cur)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: no setting %s", ErrNotFound, describe(sc, key))
		}
		if err := checkVersion(sc, cur, w); err != nil {
			return err
		}
		return b.Delete(k)
	})
	return cur, err
}

// PutArtifact implements Store: the content's blob first (once per
// content), then the record, so a record never points at a missing blob.
func (e *Engine) PutArtifact(ctx context.Context, taskID, path string, content []byte, at time.Time) (Artifact, error) {
	if err := checkArtifactName(taskID, path); err != nil {
		return Artifact{}, err
	}
	sum := sha256.Sum256(content)
	a := Artifact{TaskID: taskID, Path: path, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(content)), UpdatedAt: at.UTC()}
	if len(content) > 0 {
		if err := e.blobs.Put(ctx, ArtifactBlob(a.SHA256), content); err != nil {
			return Artifact{}, fmt.Errorf("cynode store: store the content of %s %q: %w", taskID, path, err)
		}
	}
	err := e.st.Update(ctx, func(tx state.Tx) error {
		b := tx.Bucket(artifactsPart(taskID), bucketArtifacts)
		var prev Artifact
		a.Version = 1
		if ok, err := getJSON(b, artifactKey(taskID, path), &prev); err != nil {
			return err
		} else if ok {
			a.Version = prev.Version + 1
		}
		return putJSON(b, artifactKey(taskID, path), a)
	})
	if err != nil {
		return Artifact{}, err
	}
	return a, nil
}

// GetArtifact implements Store.
func (e *Engine) GetArtifact(ctx context.Context, taskID, path string) (Artifact, []byte, error) {
	var a Artifact
	err := e.st.View(ctx, func(tx state.Tx) error {
		ok, err := getJSON(tx.Bucket(artifactsPart(taskID), bucketArtifacts), artifactKey(taskID, path), &a)
		if err == nil && !ok {
			err = fmt.Errorf("%w: task %s has no artifact at %q (artifact.list shows its paths)", ErrNotFound, taskID, path)
		}
		return err
	})
	if err != nil || a.Size == 0 {
		return a, []byte{}, err
	}
	content, err := e.blobs.Get(ctx, ArtifactBlob(a.SHA256))
	if errors.Is(err, blob.ErrNotFound) {
		return a, nil, fmt.Errorf("cynode store: blob %s of %s %q is missing", a.SHA256, taskID, path)
	}
	if err != nil {
		return a, nil, fmt.Errorf("cynode store: read the content of %s %q: %w", taskID, path, err)
	}
	return a, content, nil
}

// ListArtifacts implements Store.
func (e *Engine) ListArtifacts(ctx context.Context, taskID string, page Page) ([]Artifact, string, error) {
	var out []Artifact
	var next string
	err := e.st.View(ctx, func(tx state.Tx) error {
		out = nil
		var err error
		next, err = scanPage(tx.Bucket(artifactsPart(taskID), bucketArtifacts), taskID+"\x00", page, func(_ string, v []byte) (bool, error) {
			var a Artifact
			if err := json.Unmarshal(v, &a); err != nil {
				return false, err
			}
			out = append(out, a)
			return true, nil
		})
		return err
	})
	return out, next, err
}

// newSkillBlob names a new skill body.
func newSkillBlob() string { return "skill-" + strings.ToLower(crand.Text()) }

// PutSkill implements Store: the body goes to a new blob, the record
// points at it, and the body the record pointed at before is deleted.
func (e *Engine) PutSkill(ctx context.Context, sk Skill) error {
	if sk.ID == "" {
		return fmt.Errorf("%w: a skill needs skill_id", ErrInvalid)
	}
	body := newSkillBlob()
	if err := e.blobs.Put(ctx, body, []byte(sk.Content)); err != nil {
		return fmt.Errorf("cynode store: store the body of skill %s: %w", sk.ID, err)
	}
	rec := skillRecord{Skill: sk, Body: body}
	rec.Content = ""
	var prev skillRecord
	err := e.st.Update(ctx, func(tx state.Tx) error {
		b := tx.Bucket(partSkills, bucketSkills)
		prev = skillRecord{}
		if _, err := getJSON(b, sk.ID, &prev); err != nil {
			return err
		}
		return putJSON(b, sk.ID, rec)
	})
	switch {
	case errors.Is(err, state.ErrUnknownOutcome):
		return err // the record may point at body: keep it
	case err != nil:
		_ = e.blobs.Delete(context.WithoutCancel(ctx), body)
		return err
	}
	if prev.Body != "" {
		// Best effort: a body left behind by a failure here is an orphan
		// no record points at.
		_ = e.blobs.Delete(context.WithoutCancel(ctx), prev.Body)
	}
	return nil
}

// GetSkill implements Store.
func (e *Engine) GetSkill(ctx context.Context, id string) (Skill, error) {
	var rec skillRecord
	err := e.st.View(ctx, func(tx state.Tx) error {
		rec = skillRecord{}
		ok, err := getJSON(tx.Bucket(partSkills, bucketSkills), id, &rec)
		if err == nil && !ok {
			err = fmt.Errorf("%w: no skill %q", ErrNotFound, id)
		}
		return err
	})
	if err != nil || rec.Body == "" {
		return rec.Skill, err
	}
	body, err := e.blobs.Get(ctx, rec.Body)
	if err != nil {
		return Skill{}, fmt.Errorf("cynode store: read the body of skill %s: %w", id, err)
	}
	rec.Content = string(body)
	return rec.Skill, nil
}

// ListSkills implements Store.
func (e *Engine) ListSkills(ctx context.Context, visible func(Skill) bool, page Page) ([]Skill, string, error) {
	var out []Skill
	var next string
	err := e.st.View(ctx, func(tx state.Tx) error {
		out = nil
		var err error
		next, err = scanPage(tx.Bucket(partSkills, bucketSkills), "", page, func(_ string, v []byte) (bool, error) {
			var rec skillRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return false, err
			}
			rec.Content = ""
			if visible != nil && !visible(rec.Skill) {
				return false, nil
			}
			out = append(out, rec.Skill)
			return true, nil
		})
		return err
	})
	return out, next, err
}

// DeleteSkill implements Store.
func (e *Engine) DeleteSkill(ctx context.Context, id string) error {
	var rec skillRecord
	err := e.st.Update(ctx, func(tx state.Tx) error {
		b := tx.Bucket(partSkills, bucketSkills)
		rec = skillRecord{}
		ok, err := getJSON(b, id, &rec)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: no skill %q", ErrNotFound, id)
		}
		return b.Delete(id)
	})
	if err == nil && rec.Body != "" {
		_ = e.blobs.Delete(context.WithoutCancel(ctx), rec.Body)
	}
	return err
}

func blobSHA(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
