package atlas_test

import (
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/services/atlas"
)

// free reports whether every group's bbolt file can be opened (its service
// closed it).
func free(dir string) bool {
	for _, g := range atlas.Groups {
		db, err := bolt.Open(atlas.DBPath(dir, g), 0o600, &bolt.Options{Timeout: 10 * time.Millisecond})
		if err != nil {
			return false
		}
		_ = db.Close()
	}
	return true
}
