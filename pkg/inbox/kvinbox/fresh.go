package kvinbox

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// maxFresh bounds the entries a KV keeps between their insert and their
// wakeup mark: a wakeup never marked (its publish failed, the process
// stopped) leaves its entry in, and past the bound new ones are not kept.
const maxFresh = 4096

// freshEntry is an entry as its insert wrote it.
type freshEntry struct {
	rec *record
	rev uint64
}

// freshEntries holds the entries a KV inserted, each until its wakeup
// mark: the mark then updates the entry as the insert wrote it, without
// reading it first (markFresh).
type freshEntries struct {
	mu sync.Mutex
	m  map[string]freshEntry
}

func freshKey(project, id string) string { return project + "\x00" + id }

// put keeps r, stored at revision rev, for its mark.
func (f *freshEntries) put(r *record, rev uint64) {
	cp := *r
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = make(map[string]freshEntry)
	}
	if len(f.m) < maxFresh {
		f.m[freshKey(r.ProjectID, r.InboxID)] = freshEntry{rec: &cp, rev: rev}
	}
}

// take removes and returns the entry kept for project's id.
func (f *freshEntries) take(project, id string) (freshEntry, bool) {
	k := freshKey(project, id)
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.m[k]
	delete(f.m, k)
	return e, ok
}

// markFresh writes the wakeup-sent mark on the entry as its insert wrote
// it, at the revision it was written: a compare-and-set, so it is stored
// only if the entry has not changed since, exactly as the update that
// reads the entry first would store it. It reports whether it was stored;
// when not (the entry changed, or the write failed), the caller updates
// the entry as usual.
func (b *KV) markFresh(ctx context.Context, f freshEntry, at time.Time) bool {
	t := at.UTC()
	f.rec.WakeupSentAt = &t
	v, err := json.Marshal(f.rec)
	if err != nil {
		return false
	}
	_, err = b.kv.Update(ctx, entryKey(f.rec.ProjectID, f.rec.InboxID), v, f.rev)
	return err == nil
}
