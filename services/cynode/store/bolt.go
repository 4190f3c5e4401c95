package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/internal/boltfile"
)

var (
	bProjects  = []byte("projects")
	bSlugs     = []byte("project_slugs")
	bTasks     = []byte("tasks")
	bJobs      = []byte("jobs")
	bSettings  = []byte("settings")
	bBlobs     = []byte("blobs")
	bArtifacts = []byte("artifacts")
	bSkills    = []byte("skills")
)

// Bolt is the embedded Store: one bbolt file.
type Bolt struct {
	db *bolt.DB
}

var _ Store = (*Bolt)(nil)

// schemaVersion is the layout of the cynode store file.
const schemaVersion = "1"

// OpenBolt opens (creating) the bbolt file at path, through
// internal/boltfile: one lock timeout and ErrLocked, and a schema version
// in the meta bucket.
func OpenBolt(path string) (*Bolt, error) {
	db, err := boltfile.Open(path, boltfile.Options{Schema: &boltfile.Schema{
		Kind: "cynode store", Version: schemaVersion,
		Buckets: [][]byte{bProjects, bSlugs, bTasks, bJobs, bSettings, bBlobs, bArtifacts, bSkills},
	}})
	if err != nil {
		return nil, fmt.Errorf("cynode store: %w (is another cynode process using this data directory?)", err)
	}
	return &Bolt{db: db}, nil
}

// Close closes the file.
func (s *Bolt) Close() error { return s.db.Close() }

func getJSON(b *bolt.Bucket, key string, v any) bool {
	raw := b.Get([]byte(key))
	if raw == nil {
		return false
	}
	return json.Unmarshal(raw, v) == nil
}

func putJSON(b *bolt.Bucket, key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put([]byte(key), raw)
}

// EncodeCursor and DecodeCursor make the opaque cursor of a list.
func EncodeCursor(lastKey []byte) string { return base64.RawURLEncoding.EncodeToString(lastKey) }

func decodeCursor(c string) ([]byte, error) {
	if c == "" {
		return nil, nil
	}
	k, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, fmt.Errorf("%w: cursor %q is not one this server returned; pass the next_cursor of the previous page, or none for the first page", ErrInvalid, c)
	}
	return k, nil
}

// scan walks keys with prefix after the cursor, calling take for each
// until it has limit accepted items; it returns the next cursor ("" at the
// end).
func scan(b *bolt.Bucket, prefix []byte, page Page, take func(k, v []byte) (bool, error)) (string, error) {
	if page.Limit < 1 {
		return "", fmt.Errorf("%w: page limit %d is out of range; pass a limit of 1 or more", ErrInvalid, page.Limit)
	}
	after, err := decodeCursor(page.Cursor)
	if err != nil {
		return "", err
	}
	if after != nil && !bytes.HasPrefix(after, prefix) {
		return "", fmt.Errorf("%w: the cursor belongs to another list; pass the next_cursor of this list's previous page", ErrInvalid)
	}
	c := b.Cursor()
	var k, v []byte
	if after != nil {
		k, v = c.Seek(after)
		if bytes.Equal(k, after) {
			k, v = c.Next()
		}
	} else {
		k, v = c.Seek(prefix)
	}
	n := 0
	var last []byte
	for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if n == page.Limit {
			return EncodeCursor(last), nil
		}
		ok, err := take(k, v)
		if err != nil {
			return "", err
		}
		if ok {
			n++
			last = append(last[:0], k...)
		}
	}
	return "", nil
}

// PutProject implements Store.
func (s *Bolt) PutProject(_ context.Context, p Project) error {
	if p.ID == "" || p.Slug == "" {
		return fmt.Errorf("%w: a project needs project_id and slug", ErrInvalid)
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		if id := tx.Bucket(bSlugs).Get([]byte(p.Slug)); id != nil && string(id) != p.ID {
			return fmt.Errorf("%w: slug %q is taken by project %s", ErrExists, p.Slug, id)
		}
		// A project that changes its slug gives the old one up.
		var prev Project
		if getJSON(tx.Bucket(bProjects), p.ID, &prev) && prev.Slug != p.Slug {
			if err := tx.Bucket(bSlugs).Delete([]byte(prev.Slug)); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bSlugs).Put([]byte(p.Slug), []byte(p.ID)); err != nil {
			return err
		}
		return putJSON(tx.Bucket(bProjects), p.ID, p)
	})
}

// GetProject implements Store.
func (s *Bolt) GetProject(_ context.Context, id string) (Project, error) {
	var p Project
	err := s.db.View(func(tx *bolt.Tx) error {
		if !getJSON(tx.Bucket(bProjects), id, &p) {
			return fmt.Errorf("%w: no project %q", ErrNotFound, id)
		}
		return nil
	})
	return p, err
}

// GetProjectBySlug implements Store.
func (s *Bolt) GetProjectBySlug(ctx context.Context, slug string) (Project, error) {
	var id []byte
	_ = s.db.View(func(tx *bolt.Tx) error {
		id = slices.Clone(tx.Bucket(bSlugs).Get([]byte(slug)))
		return nil
	})
	if id == nil {
		return Project{}, fmt.Errorf("%w: no project with slug %q", ErrNotFound, slug)
	}
	return s.GetProject(ctx, string(id))
}

// ListProjects implements Store.
func (s *Bolt) ListProjects(_ context.Context, ids []string, q string, page Page) ([]Project, string, error) {
	allowed := map[string]bool{}
	for _, id := range ids {
		allowed[id] = true
	}
	q = strings.ToLower(q)
	var out []Project
	var next string
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		next, err = scan(tx.Bucket(bProjects), nil, page, func(k, v []byte) (bool, error) {
			if !allowed[string(k)] {
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
func (s *Bolt) PutTask(_ context.Context, t Task) error {
	if t.ID == "" || t.ProjectID == "" {
		return fmt.Errorf("%w: a task needs task_id and project_id", ErrInvalid)
	}
	if t.Status == "" {
		t.Status = StatusPending
	}
	if t.UpdatedAt.IsZero() {
		t.UpdatedAt = time.Now().UTC()
	}
	return s.db.Update(func(tx *bolt.Tx) error { return putJSON(tx.Bucket(bTasks), t.ID, t) })
}

// GetTask implements Store.
func (s *Bolt) GetTask(_ context.Context, id string) (Task, error) {
	var t Task
	err := s.db.View(func(tx *bolt.Tx) error {
		if !getJSON(tx.Bucket(bTasks), id, &t) {
			return fmt.Errorf("%w: no task %q", ErrNotFound, id)
		}
		return nil
	})
	return t, err
}

// CheckTransition says whether status may move from to to.
func CheckTransition(kind, id, from, to string) error {
	if !slices.Contains(Statuses, to) {
		return fmt.Errorf("%w: status %q is not one of %s", ErrInvalid, to, strings.Join(Statuses, ", "))
	}
	if !slices.Contains(Transitions[from], to) {
		legal := "none: it is terminal"
		if len(Transitions[from]) > 0 {
			legal = strings.Join(Transitions[from], ", ")
		}
		return fmt.Errorf("%w: %s %s cannot move from %s to %s (legal from %s: %s)", ErrInvalid, kind, id, from, to, from, legal)
	}
	return nil
}

// UpdateTaskStatus implements Store.
func (s *Bolt) UpdateTaskStatus(_ context.Context, id, status string, at time.Time) (before, after Task, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bTasks)
		if !getJSON(b, id, &before) {
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
func (s *Bolt) PutJob(_ context.Context, j Job) error {
	if j.ID == "" || j.TaskID == "" {
		return fmt.Errorf("%w: a job needs job_id and task_id", ErrInvalid)
	}
	if j.Status == "" {
		j.Status = StatusPending
	}
	if j.UpdatedAt.IsZero() {
		j.UpdatedAt = time.Now().UTC()
	}
	return s.db.Update(func(tx *bolt.Tx) error { return putJSON(tx.Bucket(bJobs), j.ID, j) })
}

// GetJob implements Store.
func (s *Bolt) GetJob(_ context.Context, id string) (Job, error) {
	var j Job
	err := s.db.View(func(tx *bolt.Tx) error {
		if !getJSON(tx.Bucket(bJobs), id, &j) {
			return fmt.Errorf("%w: no job %q", ErrNotFound, id)
		}
		return nil
	})
	return j, err
}

// UpdateJobStatus implements Store.
func (s *Bolt) UpdateJobStatus(_ context.Context, id, status string, at time.Time) (before, after Job, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bJobs)
		if !getJSON(b, id, &before) {
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

func scopePrefix(sc Scope) []byte { return []byte(sc.Type + "\x00" + sc.ID + "\x00") }

func settingKey(sc Scope, key string) []byte { return append(scopePrefix(sc), key...) }

// checkSettingKey refuses a scope or key whose stored key could read as
// another scope's: an empty key, a NUL (the key separator) in either.
func checkSettingKey(sc Scope, key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: a setting needs a key", ErrInvalid)
	case strings.Contains(sc.Type+sc.ID, "\x00"):
		return fmt.Errorf("%w: scope %q %q contains a NUL byte; pass the id of a project, user or task", ErrInvalid, sc.Type, sc.ID)
	case strings.Contains(key, "\x00"):
		return fmt.Errorf("%w: key %q contains a NUL byte; use a key such as \"ui.theme\"", ErrInvalid, key)
	}
	return nil
}

func describe(sc Scope, key string) string {
	if sc.Type == "system" || sc.Type == "" {
		return fmt.Sprintf("%q", key)
	}
	return fmt.Sprintf("%q (scope %s %s)", key, sc.Type, sc.ID)
}

// GetSetting implements Store.
func (s *Bolt) GetSetting(_ context.Context, sc Scope, key string) (Setting, error) {
	var st Setting
	err := s.db.View(func(tx *bolt.Tx) error {
		if !getJSON(tx.Bucket(bSettings), string(settingKey(sc, key)), &st) {
			return fmt.Errorf("%w: no setting %s", ErrNotFound, describe(sc, key))
		}
		return nil
	})
	return st, err
}

// ListSettings implements Store.
func (s *Bolt) ListSettings(_ context.Context, sc Scope, keyPrefix string, page Page) ([]Setting, string, error) {
	var out []Setting
	var next string
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		next, err = scan(tx.Bucket(bSettings), append(scopePrefix(sc), keyPrefix...), page, func(_, v []byte) (bool, error) {
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

func checkVersion(sc Scope, cur Setting, w Write) error {
	if w.ExpectedVersion != nil && *w.ExpectedVersion != cur.Version {
		return fmt.Errorf("%w: setting %s is at version %d, the call expected %d; read it again and retry with expected_version %d", ErrConflict, describe(sc, cur.Key), cur.Version, *w.ExpectedVersion, cur.Version)
	}
	return nil
}

// CreateSetting implements Store.
func (s *Bolt) CreateSetting(_ context.Context, sc Scope, st Setting, w Write) (Setting, error) {
	if err := checkSettingKey(sc, st.Key); err != nil {
		return Setting{}, err
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bSettings)
		k := settingKey(sc, st.Key)
		if b.Get(k) != nil {
			return fmt.Errorf("%w: setting %s exists; use update (with expected_version) to change it", ErrExists, describe(sc, st.Key))
		}
		st.Version, st.Reason, st.UpdatedAt, st.UpdatedBy = 1, w.Reason, w.At.UTC(), w.By
		return putJSON(b, string(k), st)
	})
	return st, err
}

// UpdateSetting implements Store.
func (s *Bolt) UpdateSetting(_ context.Context, sc Scope, st Setting, w Write) (Setting, error) {
	if err := checkSettingKey(sc, st.Key); err != nil {
		return Setting{}, err
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bSettings)
		k := settingKey(sc, st.Key)
		var cur Setting
		if !getJSON(b, string(k), &cur) {
			return fmt.Errorf("%w: no setting %s; use create first", ErrNotFound, describe(sc, st.Key))
		}
		if err := checkVersion(sc, cur, w); err != nil {
			return err
		}
		st.Version, st.Reason, st.UpdatedAt, st.UpdatedBy = cur.Version+1, w.Reason, w.At.UTC(), w.By
		return putJSON(b, string(k), st)
	})
	return st, err
}

// DeleteSetting implements Store.
func (s *Bolt) DeleteSetting(_ context.Context, sc Scope, key string, w Write) (Setting, error) {
	var cur Setting
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bSettings)
		k := settingKey(sc, key)
		if !getJSON(b, string(k), &cur) {
			return fmt.Errorf("%w: no setting %s", ErrNotFound, describe(sc, key))
		}
		if err := checkVersion(sc, cur, w); err != nil {
			return err
		}
		return b.Delete(k)
	})
	return cur, err
}

func artifactKey(taskID, path string) []byte { return []byte(taskID + "\x00" + path) }

// checkArtifactName refuses a name whose key another task's list would
// show: an empty task or path, a NUL (the key separator) in the task.
func checkArtifactName(taskID, path string) error {
	switch {
	case taskID == "" || path == "":
		return fmt.Errorf("%w: an artifact needs task_id and path", ErrInvalid)
	case strings.Contains(taskID, "\x00"):
		return fmt.Errorf("%w: task_id %q contains a NUL byte; pass the id of a stored task", ErrInvalid, taskID)
	}
	return nil
}

// PutArtifact implements Store.
func (s *Bolt) PutArtifact(_ context.Context, taskID, path string, content []byte, at time.Time) (Artifact, error) {
	if err := checkArtifactName(taskID, path); err != nil {
		return Artifact{}, err
	}
	sum := sha256.Sum256(content)
	a := Artifact{TaskID: taskID, Path: path, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(content)), UpdatedAt: at.UTC()}
	err := s.db.Update(func(tx *bolt.Tx) error {
		blobs := tx.Bucket(bBlobs)
		if blobs.Get([]byte(a.SHA256)) == nil {
			if err := blobs.Put([]byte(a.SHA256), content); err != nil {
				return err
			}
		}
		b := tx.Bucket(bArtifacts)
		var prev Artifact
		a.Version = 1
		if getJSON(b, string(artifactKey(taskID, path)), &prev) {
			a.Version = prev.Version + 1
		}
		return putJSON(b, string(artifactKey(taskID, path)), a)
	})
	return a, err
}

// GetArtifact implements Store.
func (s *Bolt) GetArtifact(_ context.Context, taskID, path string) (Artifact, []byte, error) {
	var a Artifact
	var content []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		if !getJSON(tx.Bucket(bArtifacts), string(artifactKey(taskID, path)), &a) {
			return fmt.Errorf("%w: task %s has no artifact at %q (artifact.list shows its paths)", ErrNotFound, taskID, path)
		}
		content = slices.Clone(tx.Bucket(bBlobs).Get([]byte(a.SHA256)))
		if content == nil && a.Size > 0 {
			return fmt.Errorf("cynode store: blob %s of %s %q is missing", a.SHA256, taskID, path)
		}
		return nil
	})
	return a, content, err
}

// ListArtifacts implements Store.
func (s *Bolt) ListArtifacts(_ context.Context, taskID string, page Page) ([]Artifact, string, error) {
	var out []Artifact
	var next string
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		next, err = scan(tx.Bucket(bArtifacts), []byte(taskID+"\x00"), page, func(_, v []byte) (bool, error) {
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

// PutSkill implements Store.
func (s *Bolt) PutSkill(_ context.Context, sk Skill) error {
	if sk.ID == "" {
		return fmt.Errorf("%w: a skill needs skill_id", ErrInvalid)
	}
	return s.db.Update(func(tx *bolt.Tx) error { return putJSON(tx.Bucket(bSkills), sk.ID, sk) })
}

// GetSkill implements Store.
func (s *Bolt) GetSkill(_ context.Context, id string) (Skill, error) {
	var sk Skill
	err := s.db.View(func(tx *bolt.Tx) error {
		if !getJSON(tx.Bucket(bSkills), id, &sk) {
			return fmt.Errorf("%w: no skill %q", ErrNotFound, id)
		}
		return nil
	})
	return sk, err
}

// ListSkills implements Store.
func (s *Bolt) ListSkills(_ context.Context, visible func(Skill) bool, page Page) ([]Skill, string, error) {
	var out []Skill
	var next string
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		next, err = scan(tx.Bucket(bSkills), nil, page, func(_, v []byte) (bool, error) {
			var sk Skill
			if err := json.Unmarshal(v, &sk); err != nil {
				return false, err
			}
			if visible != nil && !visible(sk) {
				return false, nil
			}
			out = append(out, sk)
			return true, nil
		})
		return err
	})
	return out, next, err
}

// DeleteSkill implements Store.
func (s *Bolt) DeleteSkill(_ context.Context, id string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bSkills)
		if b.Get([]byte(id)) == nil {
			return fmt.Errorf("%w: no skill %q", ErrNotFound, id)
		}
		return b.Delete([]byte(id))
	})
}
