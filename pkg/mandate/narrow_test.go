package mandate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

const parentPolicy = `@id("read")
permit(principal, action in [ATPAction::"get_context_package", ATPAction::"get_booking_status"], resource);
@id("prearr")
permit(principal, action == ATPAction::"update_pre_arrangement", resource)
when { context.booking_state == "PRE_JOURNEY" };
@id("hem")
permit(principal, action == ATPAction::"invoke_hem", resource)
when { ["HEM-01", "HEM-02"].contains(context.hem_id) };
@id("no-disruption")
forbid(principal, action, resource) when { context has booking_state && context.booking_state == "DISRUPTION_REVIEW" };`

const forbidCopy = `
forbid(principal, action, resource) when { context has booking_state && context.booking_state == "DISRUPTION_REVIEW" };`

func TestNarrow(t *testing.T) {
	k := mustKey(t, "demo")
	ptok := issue(t, k, parentPolicy, func(c *Claims) { b := "bk-1"; c.Resource = &b })
	v := &Verifier{Keys: StaticKeys{k}, Now: func() time.Time { return t0 }}
	parent, err := v.Verify(context.Background(), ptok, "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		policy string
		mod    func(*Claims)
		want   string // "" = accepted; else a substring of the refusal
	}{
		{"same policies", parentPolicy, nil, ""},
		{"one action of a set", `permit(principal == Agent::"sub", action == ATPAction::"get_booking_status", resource);` + forbidCopy, nil, ""},
		{"extra condition", `permit(principal, action == ATPAction::"update_pre_arrangement", resource)
when { context.booking_state == "PRE_JOURNEY" } when { context.tool == "atp_update_pre_arrangement" };` + forbidCopy, nil, ""},
		{"fewer hem_ids", `permit(principal, action == ATPAction::"invoke_hem", resource)
when { ["HEM-01", "HEM-02"].contains(context.hem_id) } when { context.hem_id == "HEM-01" };` + forbidCopy, nil, ""},
		{"extra forbid", parentPolicy + "\nforbid(principal, action, resource);", nil, ""},
		{"new action", `@id("notify") permit(principal, action == ATPAction::"notify_traveller", resource);` + forbidCopy, nil, "child policy notify (line 1) is too wide"},
		{"any action", `permit(principal, action, resource) when { context.booking_state == "PRE_JOURNEY" };` + forbidCopy, nil, "any action"},
		{"drops the state condition", `permit(principal, action == ATPAction::"update_pre_arrangement", resource);` + forbidCopy, nil, `context.booking_state == "PRE_JOURNEY"`},
		{"drops a forbid", `permit(principal, action == ATPAction::"get_booking_status", resource);`, nil, "forbid policy no-disruption"},
		{"later expiry", parentPolicy, func(c *Claims) { c.ExpiresAt = t0.Add(3 * time.Hour).Unix() }, "after the parent's"},
		{"other booking", parentPolicy, func(c *Claims) { b := "bk-2"; c.Resource = &b }, "same resource"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Claims{Subject: "sub", Mandate: Grant{PolicySet: tc.policy}}
			if tc.mod != nil {
				tc.mod(&c)
			}
			tok, err := Narrow(k, parent, c, t0)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Narrow = %v", err)
				}
				child, err := v.Verify(context.Background(), tok, "")
				if err != nil {
					t.Fatal(err)
				}
				if len(child.Claims.ParentChain) != 1 || child.Claims.ParentChain[0] != parent.Claims.JTI || child.Claims.BoundResource() != "bk-1" {
					t.Fatalf("child claims = %+v", child.Claims)
				}
				return
			}
			if !errors.Is(err, ErrTooWide) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Narrow = %v, want ErrTooWide mentioning %q", err, tc.want)
			}
		})
	}
}
