package hem

import (
	"fmt"
	"testing"
	"time"
)

// TestLayer3Catalogue: the built-in catalogue holds HEM-01…HEM-23 and
// HEM-MANDATE-01, and each row keeps the public catalogue's rules: a
// trigger reason, a deadline inside its priority's range (P1 ≤ PT15M,
// P2 ≤ PT30M, P3 ≤ PT24H, P4 ≤ PT24H), a secondary path.
func TestLayer3Catalogue(t *testing.T) {
	c := Default()
	if n := len(c.IDs()); n != 24 {
		t.Fatalf("catalogue has %d entries (%v), want HEM-01…HEM-23 and HEM-MANDATE-01", n, c.IDs())
	}
	max := map[string]time.Duration{"P1": 15 * time.Minute, "P2": 30 * time.Minute, "P3": 24 * time.Hour, "P4": 24 * time.Hour}
	for i := 1; i <= 23; i++ {
		id := fmt.Sprintf("HEM-%02d", i)
		e, ok := c.Get(id)
		if !ok {
			t.Errorf("%s missing", id)
			continue
		}
		if len(e.TriggerReasons) == 0 || e.Outcome == "" || e.Secondary.Description == "" {
			t.Errorf("%s: trigger reasons %v, outcome %q, secondary %+v: want all set", id, e.TriggerReasons, e.Outcome, e.Secondary)
		}
		if e.ProtocolDeadline <= 0 || e.ProtocolDeadline > max[e.Priority] {
			t.Errorf("%s: %s deadline %v outside its priority's range (max %v)", id, e.Priority, e.ProtocolDeadline, max[e.Priority])
		}
	}
	for id, want := range map[string]time.Duration{"HEM-01": 5 * time.Minute, "HEM-11": 10 * time.Minute, "HEM-14": 24 * time.Hour, "HEM-22": 4 * time.Hour} {
		if e, _ := c.Get(id); e.ProtocolDeadline != want {
			t.Errorf("%s deadline = %v, want %v", id, e.ProtocolDeadline, want)
		}
	}
	if e, _ := c.Get("HEM-15"); e.Secondary.Status != StatusComplete || e.Secondary.Outcome != "ORIGINAL_BOOKING_REINSTATED" {
		t.Errorf("HEM-15 secondary = %+v, want the original booking reinstated", e.Secondary)
	}
}
