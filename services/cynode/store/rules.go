package store

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
)

// The rules of the store that depend on no storage: cursors, status
// transitions, the names of settings and artifacts.

// EncodeCursor makes the opaque cursor of a list from the last key of a
// page.
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

func scopePrefix(sc Scope) string { return sc.Type + "\x00" + sc.ID + "\x00" }

func settingKey(sc Scope, key string) string { return scopePrefix(sc) + key }

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

func checkVersion(sc Scope, cur Setting, w Write) error {
	if w.ExpectedVersion != nil && *w.ExpectedVersion != cur.Version {
		return fmt.Errorf("%w: setting %s is at version %d, the call expected %d; read it again and retry with expected_version %d", ErrConflict, describe(sc, cur.Key), cur.Version, *w.ExpectedVersion, cur.Version)
	}
	return nil
}

func artifactKey(taskID, path string) string { return taskID + "\x00" + path }

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
