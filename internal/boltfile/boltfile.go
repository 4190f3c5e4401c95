// Package boltfile opens the project's bbolt files and commits their writes.
//
// Every bbolt file of the mesh (the CardStore, the registry, the inbox, the
// policy store, the ATLAS groups' files) is opened by Open: one lock timeout
// that ends in ErrLocked, fsync on every commit, and, when the caller
// describes its layout with a Schema, a schema version in the "meta" bucket
// that is written on a new file, checked on an existing one and upgraded
// from older versions in one transaction.
//
// Several kinds may share one file (a node's file holds the CardStore and
// the inbox): the file is opened once, and Init checks each kind's Schema
// on it. One kind keeps its version under VersionKey (a file it has had
// alone stays valid); every other one names its own key (Schema.Key) in
// the same meta bucket. A file whose meta bucket lacks a kind's key gets
// that kind added (its buckets created, its version written), in any
// order.
//
// Committer is the leader/follower group committer: concurrent writers
// share one fsync'd transaction without any added delay, and a Later write
// (one whose durability nobody waits for) rides along with the next
// transaction instead of paying a commit of its own.
package boltfile

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Errors of Open. The packages that open bbolt files re-export them
// (boltstore.ErrLocked is ErrLocked), so one errors.Is works everywhere.
var (
	// ErrLocked: another process (or another handle in this process) has
	// the file open; bbolt allows one per file.
	ErrLocked = errors.New("data file is locked by another process")
	// ErrSchemaVersion: the file was written with another layout, or is a
	// bbolt file of some other program.
	ErrSchemaVersion = errors.New("unsupported schema version")
)

// DefaultTimeout is how long Open waits for the file lock by default.
const DefaultTimeout = 5 * time.Second

// MetaBucket and VersionKey hold a file's schema version.
var (
	MetaBucket = []byte("meta")
	VersionKey = []byte("schema_version")
)

// Schema describes a file's layout for Open.
type Schema struct {
	// Kind names the file in errors ("inbox", "boltstore"). Required.
	Kind string
	// Version is the layout this build writes and reads. Required.
	Version string
	// Buckets are the top-level buckets of Version besides the meta
	// bucket. Open creates them in a new file and requires them in an
	// existing one.
	Buckets [][]byte
	// Upgrades maps an older version to the function that turns a file of
	// that version into one of Version. It runs in one transaction with
	// the version bump, so a crash leaves the old file as it was; it must
	// check what it needs and return an error wrapping ErrSchemaVersion
	// when the file is not what its version says.
	Upgrades map[string]func(tx *bolt.Tx) error
	// Adopt accepts a file without a meta bucket (one written before the
	// layout was versioned): Open creates the missing buckets and stamps
	// it with Version. Without Adopt such a file is refused, unless it is
	// empty.
	Adopt bool
	// Key is the meta bucket's key holding this kind's version; nil means
	// VersionKey. A kind that shares a file with another (whose version
	// is under VersionKey) has a key of its own. When the file has a meta
	// bucket but not the kind's key, the kind is new to the file and Open
	// or Init adds it, provided none of its buckets exists yet (else
	// ErrSchemaVersion).
	Key []byte
}

// versionKey is where meta holds s's version.
func (s *Schema) versionKey() []byte {
	if s.Key != nil {
		return s.Key
	}
	return VersionKey
}

// Options configure Open.
type Options struct {
	// Timeout bounds the wait for the file lock; zero means
	// DefaultTimeout. It must not be negative.
	Timeout time.Duration
	// Schema, when set, is checked (and written or upgraded) at Open.
	Schema *Schema
}

// Open opens (creating it, mode 0600, if missing) the bbolt file at path
// with fsync on every commit: a commit that returns nil is on disk. It
// fails with ErrLocked when the lock is not free within the timeout and
// with ErrSchemaVersion when the file's layout is not o.Schema's.
func Open(path string, o Options) (*bolt.DB, error) {
	if path == "" {
		return nil, errors.New("boltfile: path is required")
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("boltfile: open %s: lock timeout %v is negative; pass a positive duration or 0 for %v", path, o.Timeout, DefaultTimeout)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if s := o.Schema; s != nil {
		if err := s.check(); err != nil {
			return nil, fmt.Errorf("boltfile: open %s: %w", path, err)
		}
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      o.Timeout,
		FreelistType: bolt.FreelistMapType,
		NoSync:       false, // every commit is fsync'd: a nil return means on disk
	})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("open %s: %w (gave up after %v; is another process using this file?)", path, ErrLocked, o.Timeout)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if o.Schema != nil {
		if err := initSchema(db, o.Schema); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}
	return db, nil
}

// check refuses a Schema without its required fields.
func (s *Schema) check() error {
	if s.Kind == "" || s.Version == "" {
		return errors.New("Schema.Kind and Schema.Version are required")
	}
	if s.Key != nil && (len(s.Key) == 0 || bytes.Equal(s.Key, VersionKey)) {
		return fmt.Errorf("Schema.Key of kind %s must be a key other than %q (nil means %q)", s.Kind, VersionKey, VersionKey)
	}
	return nil
}

// Init checks (writes, upgrades) schema s on a file Open has opened, as
// Open does with Options.Schema: a kind that shares the file with the kind
// Open checked has its own Schema.Key. Call it before the file is written
// by anything else: an upgrade or an addition runs in a transaction of its
// own.
func Init(db *bolt.DB, s *Schema) error {
	if db == nil || s == nil {
		return errors.New("boltfile: Init: a file and a schema are required")
	}
	if err := s.check(); err != nil {
		return fmt.Errorf("boltfile: init %s: %w", db.Path(), err)
	}
	if err := initSchema(db, s); err != nil {
		return fmt.Errorf("init %s: %w", db.Path(), err)
	}
	return nil
}

// initSchema writes the layout of a new file, upgrades an older one or
// checks an existing one. The common case (an existing file of the current
// version) needs only a read transaction.
func initSchema(db *bolt.DB, s *Schema) error {
	var fresh, adopt bool
	var upgrade func(tx *bolt.Tx) error
	var from string
	err := db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(MetaBucket)
		if meta == nil {
			var foreign []string
			_ = tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
				foreign = append(foreign, string(name))
				return nil
			})
			switch {
			case len(foreign) == 0:
				fresh = true
			case s.Adopt:
				adopt = true
			default:
				return fmt.Errorf("%w: file has no %q bucket but has buckets %q: not a %s file", ErrSchemaVersion, MetaBucket, foreign, s.Kind)
			}
			return nil
		}
		raw := meta.Get(s.versionKey())
		if raw == nil {
			// A kind new to a shared file (whose other kind wrote the
			// meta bucket): it is added, unless some of its buckets are
			// there already (written by whom?).
			for _, name := range s.Buckets {
				if !bytes.Equal(name, MetaBucket) && tx.Bucket(name) != nil {
					return fmt.Errorf("%w: file has bucket %q of kind %s but no %q version in its %q bucket", ErrSchemaVersion, name, s.Kind, s.versionKey(), MetaBucket)
				}
			}
			fresh = true
			return nil
		}
		v := string(raw)
		if v != s.Version {
			if up, ok := s.Upgrades[v]; ok {
				upgrade, from = up, v
				return nil
			}
			return fmt.Errorf("%w: %s file has schema version %q, this build reads %q%s", ErrSchemaVersion, s.Kind, v, s.Version, upgradable(s))
		}
		for _, name := range s.Buckets {
			if tx.Bucket(name) == nil {
				return fmt.Errorf("%w: schema version %s %s file lacks bucket %q", ErrSchemaVersion, v, s.Kind, name)
			}
		}
		return nil
	})
	if err != nil || (!fresh && !adopt && upgrade == nil) {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if upgrade != nil {
			if err := upgrade(tx); err != nil {
				return err
			}
		}
		for _, name := range s.Buckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %q: %w", name, err)
			}
		}
		meta, err := tx.CreateBucketIfNotExists(MetaBucket)
		if err != nil {
			return fmt.Errorf("create bucket %q: %w", MetaBucket, err)
		}
		return meta.Put(s.versionKey(), []byte(s.Version))
	})
	if err != nil && upgrade != nil {
		return fmt.Errorf("upgrade %s schema version %s to %s: %w", s.Kind, from, s.Version, err)
	}
	return err
}

// upgradable lists the versions s upgrades, for an error message.
func upgradable(s *Schema) string {
	if len(s.Upgrades) == 0 {
		return ""
	}
	vs := make([]string, 0, len(s.Upgrades))
	for v := range s.Upgrades {
		vs = append(vs, fmt.Sprintf("%q", v))
	}
	sort.Strings(vs)
	return fmt.Sprintf(" (and upgrades %v)", vs)
}
