package utp_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/utp"
)

func admissionFixture(t testing.TB) (ed25519.PrivateKey, utp.AdmissionKeys, utp.Admission, *utp.Command) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keys := func(kid string) (ed25519.PublicKey, error) {
		if kid != "k1" {
			return nil, errors.New("unknown kid")
		}
		return pub, nil
	}
	cmd := &utp.Command{AgentID: "a", AgentTurnID: "t", TurnEpoch: 2, ToolCallID: "c", ToolCallCardID: "card",
		AfterExecution: card.Suspend, ToolName: "echo"}
	a := utp.Admission{KeyID: "k1", Subject: "cg.v1r4.p.c.cmd.tool.echo", AgentID: "a", AgentTurnID: "t", TurnEpoch: 2,
		ToolCallID: "c", ToolCallCardID: "card", ToolName: "echo", AfterExecution: card.Suspend, Principal: "agent:a",
		CardSHA256: utp.ContentSHA256([]byte(`{"tool_name":"echo"}`)), IssuedAt: 1}
	return priv, keys, a, cmd
}

func TestAdmissionRoundTrip(t *testing.T) {
	priv, keys, a, cmd := admissionFixture(t)
	hdr, err := utp.SignAdmission(priv, a)
	if err != nil {
		t.Fatal(err)
	}
	got, err := utp.VerifyAdmission(keys, hdr, a.Subject, cmd)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if kind, name := got.PrincipalKind(); kind != utp.PrincipalAgent || name != "a" {
		t.Fatalf("principal %q %q", kind, name)
	}
	if err := got.CheckCard([]byte(`{"tool_name":"echo"}`)); err != nil {
		t.Fatal(err)
	}
	if err := got.CheckCard([]byte(`{"tool_name":"echo","x":1}`)); !errors.Is(err, utp.ErrAdmission) {
		t.Fatalf("changed card: %v", err)
	}
}

func TestAdmissionRefused(t *testing.T) {
	priv, keys, a, cmd := admissionFixture(t)
	hdr, _ := utp.SignAdmission(priv, a)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	forged, _ := utp.SignAdmission(other, a)
	cases := []struct {
		name, hdr, subject string
		mutate             func(c *utp.Command)
	}{
		{"missing", "", a.Subject, nil},
		{"no dot", "abc", a.Subject, nil},
		{"bad base64", "!!.!!", a.Subject, nil},
		{"forged", forged, a.Subject, nil},
		{"other subject", hdr, "cg.v1r4.p.c.cmd.tool.other", nil},
		{"other agent", hdr, a.Subject, func(c *utp.Command) { c.AgentID = "b" }},
		{"other epoch", hdr, a.Subject, func(c *utp.Command) { c.TurnEpoch = 3 }},
		{"other card", hdr, a.Subject, func(c *utp.Command) { c.ToolCallCardID = "x" }},
		{"other tool", hdr, a.Subject, func(c *utp.Command) { c.ToolName = "x" }},
		{"other after_execution", hdr, a.Subject, func(c *utp.Command) { c.AfterExecution = card.Terminate }},
		{"tampered", strings.Replace(hdr, hdr[:4], "eyJ2", 1) + "x", a.Subject, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := *cmd
			if tc.mutate != nil {
				tc.mutate(&c)
			}
			if _, err := utp.VerifyAdmission(keys, tc.hdr, tc.subject, &c); !errors.Is(err, utp.ErrAdmission) {
				t.Fatalf("err = %v, want ErrAdmission", err)
			}
		})
	}
}

func FuzzVerifyAdmission(f *testing.F) {
	priv, keys, a, cmd := admissionFixture(f)
	hdr, _ := utp.SignAdmission(priv, a)
	f.Add(hdr)
	f.Add("e30.AAAA")
	f.Fuzz(func(t *testing.T, h string) {
		_, _ = utp.VerifyAdmission(keys, h, a.Subject, cmd) // must not panic
	})
}
