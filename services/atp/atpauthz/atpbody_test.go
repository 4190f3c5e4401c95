package atpauthz_test

import (
	"encoding/json"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/services/atp/atpauthz"
)

// TestATPDenialBody: the gate's denial of an ATP action carries the ATP
// catalogue's body (error, required_scope, mandate_scopes,
// atp_error_code MCP-403-SCOPE); other actions keep the mesh's shape.
func TestATPDenialBody(t *testing.T) {
	for _, c := range []struct {
		name, action, want string
	}{
		{"ATP action", `ATPAction::"get_booking_status"`,
			`{"reason":"mandate_scope_violation","tool":"t","required_action":"ATPAction::\"get_booking_status\"","required_scopes":["BOOKING_READ"],"granted":["policy0: ATPAction::\"notify_traveller\""],"policies":[],"error":"mandate_scope_violation","required_scope":"BOOKING_READ","mandate_scopes":["policy0: ATPAction::\"notify_traveller\""],"atp_error_code":"MCP-403-SCOPE"}`},
		{"other action", `Action::"echo"`,
			`{"reason":"mandate_scope_violation","tool":"t","required_action":"Action::\"echo\"","required_scopes":["BOOKING_READ"],"granted":["policy0: ATPAction::\"notify_traveller\""],"policies":[]}`},
	} {
		d := authz.AuthFailedDetail{Reason: authz.ReasonScopeViolation, Tool: "t", RequiredAction: c.action, RequiredScopes: []string{"BOOKING_READ"},
			Granted: []string{`policy0: ATPAction::"notify_traveller"`}, Policies: []string{}}
		atpauthz.New(nil).DecorateDenial(&d)
		got, _ := json.Marshal(d)
		if string(got) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}
