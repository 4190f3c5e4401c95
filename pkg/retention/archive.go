package retention

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
)

// Archiver keeps the cards of a turn before the sweeper deletes it.
// Archive returns only once the cards are durable (a file synced, an
// object stored): the turn is deleted right after. cards are one turn's,
// in replay (write) order. An object store plugs in here.
type Archiver interface {
	Archive(ctx context.Context, project, agentTurnID string, cards []*card.Card) error
}

// WriteJSONL writes cards as JSON lines, one card's canonical encoding
// (card.Encode) per line: the format of archives and of `utpmesh turns
// export`, which a Put of each line restores.
func WriteJSONL(w io.Writer, cards []*card.Card) error {
	for _, c := range cards {
		b, err := card.Encode(c)
		if err != nil {
			return fmt.Errorf("retention: encode card %s: %w", c.CardID, err)
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
	}
	return nil
}

// FileArchive appends archived turns to JSON-lines files under Dir, one
// file per project and UTC day of the sweep:
// <Dir>/<project>/<YYYY-MM-DD>.jsonl (directories 0700, files 0600).
// Each turn is appended and synced before Archive returns.
type FileArchive struct {
	// Dir is the archive's root, e.g. <data dir>/archive.
	Dir string
	// Clock names the day's file (default time.Now).
	Clock func() time.Time

	mu sync.Mutex
}

var _ Archiver = (*FileArchive)(nil)

// Path returns the file a turn archived at t goes to.
func (a *FileArchive) Path(project string, t time.Time) string {
	return filepath.Join(a.Dir, project, t.UTC().Format("2006-01-02")+".jsonl")
}

// Archive appends the turn's cards to the day's file and syncs it.
func (a *FileArchive) Archive(ctx context.Context, project, agentTurnID string, cards []*card.Card) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := card.ValidateName("project_id", project); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	now := time.Now
	if a.Clock != nil {
		now = a.Clock
	}
	path := a.Path(project, now())
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("retention: archive dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("retention: open archive: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("retention: archive %s: %w", path, err)
	}
	werr := WriteJSONL(f, cards)
	if werr == nil {
		werr = f.Sync()
	}
	if werr != nil {
		// No half turn (or half line) before the next one.
		_ = f.Truncate(st.Size())
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("retention: archive turn %q of project %s to %s: %w", agentTurnID, project, path, werr)
	}
	return nil
}
