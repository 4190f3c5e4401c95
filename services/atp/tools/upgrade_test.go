package tools_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/utpmesh/utpmesh/services/atp"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/atp/internal/atptest"
	"github.com/utpmesh/utpmesh/services/atp/tools"
)

// Upgrading: a data directory with the atp.db an earlier version wrote
// (booking/testdata/atp-v1.db) is imported into the shared state when the
// service starts, once, and its booking answers calls.
func TestUpgradeImportsATPDB(t *testing.T) {
	dir := t.TempDir()
	raw, err := os.ReadFile(filepath.Join("..", "booking", "testdata", "atp-v1.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(atp.DBPath(dir), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	h := atptest.StartIn(t, dir, atptest.Options{})
	const id = "0190f3a2-0000-7000-8000-000000000001"
	tok := h.Mandate("guest-agent", atptest.AllTools())
	r := h.Agent("guest-agent", tok).OK(tools.ToolGetBookingStatus, map[string]any{"booking_object_id": id})
	if st := atptest.Str(r.Obj(), "state"); st != "PRE_JOURNEY" {
		t.Fatalf("the imported booking's status = %v", r.Obj())
	}
	if _, err := os.Stat(atp.DBPath(dir) + booking.ImportedSuffix); err != nil {
		t.Fatalf("atp.db not renamed after the import: %v", err)
	}
	h.Stop()
	// A restart finds no atp.db: the bookings are where the import put them.
	h2 := atptest.StartIn(t, dir, atptest.Options{})
	if b, err := h2.Service.Store().Get(t.Context(), atptest.Project, id); err != nil || b.EventCount != 3 {
		t.Fatalf("after a restart: %+v, %v", b, err)
	}
}
