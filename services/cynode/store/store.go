// Package store is the data behind the CyNodeAI tools: projects, tasks,
// jobs, system settings, preferences, task artifacts and skills. Store is
// the interface the tools use; Engine implements it over the tool
// services' state engine (records in a services/state Store, contents in
// a services/state/blob Store), so that every worker of the service sees
// one dataset: in JetStream (kvstate and objblob, the default) or in a
// local file and directory (boltstate and dirblob, OpenLocal: one
// worker). ImportLegacy copies the cynode.db of an earlier version once.
// Every method is one typed operation (no query text crosses it), every
// list is paginated by an opaque cursor, and every conflict is a sentinel
// error.
package store

import (
	"context"
	"errors"
	"time"
)

// Errors. Every error a Store returns for a caller's mistake wraps one of
// them; the message says which object and what to do.
var (
	// ErrNotFound: no such object (or not visible to the caller).
	ErrNotFound = errors.New("cynode store: not found")
	// ErrExists: create of a key that exists.
	ErrExists = errors.New("cynode store: already exists")
	// ErrConflict: expected_version does not match the stored version.
	ErrConflict = errors.New("cynode store: version conflict")
	// ErrInvalid: an argument is unusable (bad status transition, bad
	// cursor, bad scope).
	ErrInvalid = errors.New("cynode store: invalid argument")
)

// Project is one project.
type Project struct {
	ID          string `json:"project_id"`
	Slug        string `json:"slug"`
	DisplayName string `json:"display_name"`
	Description string `json:"description"`
}

// Task is one task of a project.
type Task struct {
	ID        string `json:"task_id"`
	ProjectID string `json:"project_id"`
	Title     string `json:"title"`
	// UserID is the user the task was created for ("" when none); the
	// user level of db.preference.effective.
	UserID    string    `json:"user_id,omitempty"`
	Status    string    `json:"status"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Job is one job of a task.
type Job struct {
	ID        string    `json:"job_id"`
	TaskID    string    `json:"task_id"`
	Status    string    `json:"status"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Setting is a system setting or a preference: a typed value with a
// version that grows by one on every update.
type Setting struct {
	ScopeType string    `json:"scope_type,omitempty"`
	ScopeID   string    `json:"scope_id,omitempty"`
	Key       string    `json:"key"`
	Value     any       `json:"value"`
	ValueType string    `json:"value_type"`
	Version   int64     `json:"version"`
	Reason    string    `json:"reason,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
	UpdatedBy string    `json:"updated_by,omitempty"`
}

// Scope names a preference scope: scope_type system (no id), project,
// user or task (with the id of that project, user or task).
type Scope struct {
	Type string
	ID   string
}

// Artifact describes one stored artifact (its content lives in a
// content-addressed blob).
type Artifact struct {
	TaskID    string    `json:"task_id"`
	Path      string    `json:"path"`
	SHA256    string    `json:"sha256"`
	Size      int64     `json:"size_bytes"`
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Page asks for one page of a list.
type Page struct {
	// Limit is the page size, 1 or more (callers bound it); a list
	// refuses a smaller one with ErrInvalid.
	Limit int
	// Cursor is the opaque next_cursor of the previous page, or "".
	Cursor string
}

// Write carries who changes a setting and why.
type Write struct {
	// ExpectedVersion, when set, must equal the stored version.
	ExpectedVersion *int64
	Reason          string
	By              string
	At              time.Time
}

// Store is what the CyNodeAI tools read and write.
type Store interface {
	PutProject(ctx context.Context, p Project) error
	GetProject(ctx context.Context, id string) (Project, error)
	GetProjectBySlug(ctx context.Context, slug string) (Project, error)
	// ListProjects lists the projects among ids whose slug, display name
	// or description contains q (case-insensitive).
	ListProjects(ctx context.Context, ids []string, q string, page Page) ([]Project, string, error)

	PutTask(ctx context.Context, t Task) error
	GetTask(ctx context.Context, id string) (Task, error)
	// UpdateTaskStatus moves a task to status if the transition is legal.
	UpdateTaskStatus(ctx context.Context, id, status string, at time.Time) (before, after Task, err error)
	PutJob(ctx context.Context, j Job) error
	GetJob(ctx context.Context, id string) (Job, error)
	UpdateJobStatus(ctx context.Context, id, status string, at time.Time) (before, after Job, err error)

	GetSetting(ctx context.Context, scope Scope, key string) (Setting, error)
	ListSettings(ctx context.Context, scope Scope, keyPrefix string, page Page) ([]Setting, string, error)
	CreateSetting(ctx context.Context, scope Scope, s Setting, w Write) (Setting, error)
	UpdateSetting(ctx context.Context, scope Scope, s Setting, w Write) (Setting, error)
	DeleteSetting(ctx context.Context, scope Scope, key string, w Write) (Setting, error)

	// PutArtifact stores content under (task, path); the same content is
	// stored once (by its SHA-256).
	PutArtifact(ctx context.Context, taskID, path string, content []byte, at time.Time) (Artifact, error)
	GetArtifact(ctx context.Context, taskID, path string) (Artifact, []byte, error)
	ListArtifacts(ctx context.Context, taskID string, page Page) ([]Artifact, string, error)

	PutSkill(ctx context.Context, sk Skill) error
	GetSkill(ctx context.Context, id string) (Skill, error)
	// ListSkills lists every skill for which visible is true, by id
	// (every skill when visible is nil), without content.
	ListSkills(ctx context.Context, visible func(Skill) bool, page Page) ([]Skill, string, error)
	DeleteSkill(ctx context.Context, id string) error

	Close() error
}

// Skill is one stored skill (a markdown document for inference models).
type Skill struct {
	ID   string `json:"skill_id"`
	Name string `json:"name"`
	// Scope is user, group, project or global; ScopeID names the user,
	// group or project ("" for global).
	Scope     string    `json:"scope"`
	ScopeID   string    `json:"scope_id,omitempty"`
	Owner     string    `json:"owner"`
	Content   string    `json:"content,omitempty"`
	SHA256    string    `json:"sha256"`
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Task and job statuses, and the legal transitions between them: a
// terminal status (completed, failed, canceled) is never left.
const (
	StatusPending   = "pending"
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusCanceled  = "canceled"
)

// Transitions maps a status to the statuses it may move to.
var Transitions = map[string][]string{
	StatusPending: {StatusRunning, StatusCanceled},
	StatusRunning: {StatusCompleted, StatusFailed, StatusCanceled},
}

// Statuses lists every status.
var Statuses = []string{StatusPending, StatusRunning, StatusCompleted, StatusFailed, StatusCanceled}

// SystemScope is the scope of system settings.
var SystemScope = Scope{Type: "system"}
