package store

import (
	"fmt"

	"github.com/utpmesh/utpmesh/services/state/blob/dirblob"
	"github.com/utpmesh/utpmesh/services/state/boltstate"
)

// OpenLocal opens the local mode of the engine: the records in the bbolt
// file stateFile (boltstate), the contents in the directory blobDir
// (dirblob), blobs over maxBlobBytes refused (0: blob.DefaultMaxBytes).
// One process may open the file; a second Open waits for its lock and
// fails.
func OpenLocal(stateFile, blobDir string, maxBlobBytes int64) (*Engine, error) {
	st, err := boltstate.Open(stateFile, 0)
	if err != nil {
		return nil, fmt.Errorf("cynode store: %w (is another cynode process using this data directory?)", err)
	}
	bl, err := dirblob.Open(blobDir, maxBlobBytes)
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("cynode store: %w", err)
	}
	return New(st, bl), nil
}
