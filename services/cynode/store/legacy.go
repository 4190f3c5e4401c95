package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/internal/boltfile"
	"github.com/utpmesh/utpmesh/services/state"
)

// LegacyFile is the file the cynode service kept its data in before the
// state engine (under the data directory); ImportedSuffix is appended to
// it once ImportLegacy copied it.
const (
	LegacyFile     = "cynode.db"
	ImportedSuffix = ".imported"
)

// Imported counts what ImportLegacy copied. Records the engine already
// holds (a file imported before, or an id another worker created since)
// are kept as they are and counted in Skipped.
type Imported struct {
	Projects, Tasks, Jobs, Settings, Artifacts, Skills, Skipped int
	// Blobs counts the artifact contents written to the blob store (one
	// already there counts too: a blob is written once).
	Blobs int
}

// importBatch is how many records one import transaction copies.
const importBatch = 50

// ImportLegacy copies the file at path, written by the cynode service
// before it kept its data in the state engine ("cynode store" schema 1:
// buckets projects, project_slugs, tasks, jobs, settings, artifacts,
// skills, and blobs with the artifacts' contents), into e, then renames
// it to path+ImportedSuffix so that it is imported once. The contents go
// to e's blob store first, then the records, so no record points at a
// missing blob. A missing file imports nothing; an import cut short is
// simply run again.
func ImportLegacy(ctx context.Context, path string, e *Engine) (Imported, error) {
	var n Imported
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return n, nil
	}
	db, err := boltfile.Open(path, boltfile.Options{Timeout: 5 * time.Second, Schema: &boltfile.Schema{Kind: "cynode store", Version: schemaV1}})
	if err != nil {
		return n, fmt.Errorf("cynode store: import %s: %w (is a cynode worker of an older version still running on this data directory? stop it first)", path, err)
	}
	err = db.View(func(btx *bolt.Tx) error { return importV1(ctx, btx, e, &n) })
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("cynode store: import %s: %w", path, err)
	}
	if err := os.Rename(path, path+ImportedSuffix); err != nil {
		return n, fmt.Errorf("cynode store: imported %s, but could not rename it (it will be imported again, skipping what is there): %w", path, err)
	}
	return n, nil
}

// schemaV1 is the version of the layout the legacy file has.
const schemaV1 = "1"

// record is one record to copy: its place in the engine and a counter.
type record struct {
	part, bucket, key string
	value             []byte
	count             *int
}

func importV1(ctx context.Context, btx *bolt.Tx, e *Engine, n *Imported) error {
	each := func(bucket string, fn func(k, v []byte) (record, error)) ([]record, error) {
		b := btx.Bucket([]byte(bucket))
		if b == nil {
			return nil, nil
		}
		var out []record
		err := b.ForEach(func(k, v []byte) error {
			if v == nil {
				return nil
			}
			r, err := fn(slices.Clone(k), slices.Clone(v))
			if err == nil && r.part != "" {
				out = append(out, r)
			}
			return err
		})
		return out, err
	}
	var all []record
	add := func(rs []record, err error) error {
		all = append(all, rs...)
		return err
	}
	if err := add(each("projects", func(k, v []byte) (record, error) {
		return record{partProjects, bucketProjects, string(k), v, &n.Projects}, nil
	})); err != nil {
		return err
	}
	if err := add(each("project_slugs", func(k, v []byte) (record, error) {
		return record{partProjects, bucketSlugs, string(k), v, nil}, nil
	})); err != nil {
		return err
	}
	if err := add(each("tasks", func(k, v []byte) (record, error) {
		return record{taskPart(string(k)), bucketTasks, string(k), v, &n.Tasks}, nil
	})); err != nil {
		return err
	}
	if err := add(each("jobs", func(k, v []byte) (record, error) {
		return record{jobPart(string(k)), bucketJobs, string(k), v, &n.Jobs}, nil
	})); err != nil {
		return err
	}
	if err := add(each("settings", func(k, v []byte) (record, error) {
		parts := strings.SplitN(string(k), "\x00", 3)
		if len(parts) != 3 {
			return record{}, fmt.Errorf("setting key %q is not <scope type>\\0<scope id>\\0<key>", k)
		}
		return record{settingsPart(Scope{Type: parts[0], ID: parts[1]}), bucketSettings, string(k), v, &n.Settings}, nil
	})); err != nil {
		return err
	}
	blobs := btx.Bucket([]byte("blobs"))
	if err := add(each("artifacts", func(k, v []byte) (record, error) {
		task, _, ok := strings.Cut(string(k), "\x00")
		if !ok {
			return record{}, fmt.Errorf("artifact key %q is not <task>\\0<path>", k)
		}
		var a Artifact
		if err := json.Unmarshal(v, &a); err != nil {
			return record{}, fmt.Errorf("artifact %q: %w", k, err)
		}
		if a.Size > 0 {
			var content []byte
			if blobs != nil {
				content = blobs.Get([]byte(a.SHA256))
			}
			if content == nil || blobSHA(string(content)) != a.SHA256 {
				return record{}, fmt.Errorf("artifact %q: its content %s is missing from the file or damaged", k, a.SHA256)
			}
			if err := e.blobs.Put(ctx, ArtifactBlob(a.SHA256), content); err != nil {
				return record{}, err
			}
			n.Blobs++
		}
		return record{artifactsPart(task), bucketArtifacts, string(k), v, &n.Artifacts}, nil
	})); err != nil {
		return err
	}
	if err := add(each("skills", func(k, v []byte) (record, error) {
		var sk Skill
		if err := json.Unmarshal(v, &sk); err != nil {
			return record{}, fmt.Errorf("skill %q: %w", k, err)
		}
		rec := skillRecord{Skill: sk, Body: "skill-v1-" + skillBodyKey(string(k))}
		if err := e.blobs.Put(ctx, rec.Body, []byte(sk.Content)); err != nil {
			return record{}, err
		}
		rec.Content = ""
		raw, err := json.Marshal(rec)
		if err != nil {
			return record{}, err
		}
		return record{partSkills, bucketSkills, string(k), raw, &n.Skills}, nil
	})); err != nil {
		return err
	}
	for len(all) > 0 {
		batch := all[:min(importBatch, len(all))]
		all = all[len(batch):]
		var added []bool
		err := e.st.Update(ctx, func(tx state.Tx) error {
			added = added[:0]
			for _, r := range batch {
				b := tx.Bucket(r.part, r.bucket)
				_, found, err := b.Get(r.key)
				if err != nil {
					return err
				}
				added = append(added, !found)
				if !found {
					if err := b.Put(r.key, r.value); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for i, r := range batch {
			switch {
			case !added[i]:
				n.Skipped++
			case r.count != nil:
				*r.count++
			}
		}
	}
	return nil
}

// skillBodyKey makes a blob-name token of a skill id: the id itself when
// it is one, its hex SHA-256 otherwise.
func skillBodyKey(id string) string {
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') || i >= 100 {
			return blobSHA(id)
		}
	}
	return id
}
