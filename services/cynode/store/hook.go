package store

import (
	"context"
	"slices"
	"time"
)

// Terminal reports whether a task or job status is never left
// (completed, failed, canceled).
func Terminal(status string) bool {
	return slices.Contains([]string{StatusCompleted, StatusFailed, StatusCanceled}, status)
}

// WithTaskHook returns st with fn called after a task was stored in a
// terminal status, through UpdateTaskStatus or PutTask (the git tools
// remove the task's clones there). fn runs after the write succeeded, in
// the writer's goroutine.
func WithTaskHook(st Store, fn func(ctx context.Context, t Task)) Store {
	return &taskHook{Store: st, fn: fn}
}

type taskHook struct {
	Store
	fn func(ctx context.Context, t Task)
}

var _ Store = (*taskHook)(nil)

// UpdateTaskStatus implements Store.
func (h *taskHook) UpdateTaskStatus(ctx context.Context, id, status string, at time.Time) (Task, Task, error) {
	before, after, err := h.Store.UpdateTaskStatus(ctx, id, status, at)
	if err == nil && Terminal(after.Status) {
		h.fn(ctx, after)
	}
	return before, after, err
}

// PutTask implements Store.
func (h *taskHook) PutTask(ctx context.Context, t Task) error {
	err := h.Store.PutTask(ctx, t)
	if err == nil && Terminal(t.Status) {
		h.fn(ctx, t)
	}
	return err
}
