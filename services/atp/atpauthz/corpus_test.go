package atpauthz_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/authz"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/services/atp/atpauthz"
)

type corpus struct {
	Project         string `json:"project"`
	Booking         string `json:"booking"`
	ProjectPolicies string `json:"project_policies"`
	MandatePolicies string `json:"mandate_policies"`
	Tools           []struct {
		ToolName string   `json:"tool_name"`
		Action   string   `json:"action"`
		Scopes   []string `json:"scopes"`
	} `json:"tools"`
	States []string `json:"states"`
	HEMIDs []string `json:"hem_ids"`
	Cases  []struct {
		Name            string `json:"name"`
		Tool            string `json:"tool"`
		State           string `json:"state"`
		HEMID           string `json:"hem_id"`
		BookingObjectID string `json:"booking_object_id"`
		Agent           string `json:"agent"`
		Project         string `json:"project"`
		NoMandate       bool   `json:"no_mandate"`
		Expired         bool   `json:"expired"`
		Forged          bool   `json:"forged"`
		Want            string `json:"want"`
	} `json:"cases"`
}

var now = time.Date(2026, 4, 7, 12, 0, 0, 0, time.UTC)

// fixture is a gate over the corpus: project policies, an issuer key per
// project, and the guest agent's mandate bound to the corpus booking.
type fixture struct {
	c       corpus
	gate    *authz.Gate
	store   *authz.MemoryStore
	keys    mandate.StaticKeys
	token   string
	expired string
	mandate *mandate.Mandate
	tools   map[string]authz.ToolAction
}

func loadFixture(t testing.TB) *fixture {
	t.Helper()
	raw, err := os.ReadFile("testdata/corpus.json")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{tools: map[string]authz.ToolAction{}}
	if err := json.Unmarshal(raw, &f.c); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f.store = authz.NewMemoryStore()
	for _, p := range []string{f.c.Project, "other"} {
		if _, err := f.store.PutPolicies(ctx, p, f.c.ProjectPolicies); err != nil {
			t.Fatal(err)
		}
		k, err := mandate.GenerateKey(p)
		if err != nil {
			t.Fatal(err)
		}
		f.keys = append(f.keys, k)
	}
	if _, err := authz.ParseAndValidate("mandate", f.c.MandatePolicies); err != nil {
		t.Fatal(err)
	}
	issue := func(exp time.Time) string {
		b := f.c.Booking
		tok, err := mandate.Issue(f.keys[0], mandate.Claims{Subject: "guest-agent", Resource: &b, ExpiresAt: exp.Unix(),
			Mandate: mandate.Grant{PolicySet: f.c.MandatePolicies}}, now.Add(-2*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	f.token, f.expired = issue(now.Add(time.Hour)), issue(now.Add(-time.Hour))
	f.gate, err = authz.NewGate(authz.GateConfig{Policies: f.store, Keys: f.keys, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	v := &mandate.Verifier{Keys: f.keys, Now: func() time.Time { return now }}
	if f.mandate, err = v.Verify(ctx, f.token, mandate.IssuerName(f.c.Project)); err != nil {
		t.Fatal(err)
	}
	for _, tl := range f.c.Tools {
		a, err := authz.ParseAction(tl.Action)
		if err != nil {
			t.Fatal(err)
		}
		f.tools[tl.ToolName] = authz.ToolAction{ToolName: tl.ToolName, Action: a, Scopes: tl.Scopes}
	}
	return f
}

func (f *fixture) request(tool, state, hemID, booking, token string) *authz.Request {
	ta := f.tools[tool]
	args := map[string]string{}
	if hemID != "" {
		args["hem_id"] = hemID
	}
	if booking != "" {
		args["booking_object_id"] = booking
	}
	raw, _ := json.Marshal(args)
	return &authz.Request{Version: "v1r3", Project: f.c.Project, Channel: "main", AgentID: "guest-agent", ToolName: tool,
		Action: ta.Action, Scopes: ta.Scopes, Arguments: raw, Mandate: token, State: &state}
}

func forge(tok string) string {
	p := strings.Split(tok, ".")
	claims, _ := base64.RawURLEncoding.DecodeString(p[1])
	c := strings.Replace(string(claims), `"guest-agent"`, `"guest-agenT"`, 1)
	return p[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(c)) + "." + p[2]
}

// TestCorpus runs the allow/deny cases of testdata/corpus.json.
func TestCorpus(t *testing.T) {
	f := loadFixture(t)
	for _, tc := range f.c.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			tok := f.token
			switch {
			case tc.NoMandate:
				tok = ""
			case tc.Expired:
				tok = f.expired
			case tc.Forged:
				tok = forge(f.token)
			}
			req := f.request(tc.Tool, tc.State, tc.HEMID, tc.BookingObjectID, tok)
			if tc.Agent != "" {
				req.AgentID = tc.Agent
			}
			if tc.Project != "" {
				req.Project = tc.Project
			}
			d, err := f.gate.Decide(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if d.Reason != tc.Want || d.Allowed != (tc.Want == authz.ReasonAllowed) {
				t.Fatalf("decision = %+v, want %s", d, tc.Want)
			}
			if d.Allowed && len(d.Policies) == 0 {
				t.Fatalf("an allow names no policies: %+v", d)
			}
			if tc.Want == authz.ReasonScopeViolation && len(d.Granted) == 0 {
				t.Fatalf("a scope violation lists no grants: %+v", d)
			}
		})
	}
}

// TestResidualAgreesWithGate is the property of the Windley Loop: for every
// tool and booking state of the corpus, a call inside the residual set is
// allowed at the gate and one outside it is denied, for every hem_id.
func TestResidualAgreesWithGate(t *testing.T) {
	f := loadFixture(t)
	ctx := context.Background()
	pps, err := mandate.ParsePolicies("project", f.c.ProjectPolicies)
	if err != nil {
		t.Fatal(err)
	}
	var tools []authz.ToolAction
	for _, ta := range f.tools {
		tools = append(tools, ta)
	}
	checked := 0
	for _, state := range f.c.States {
		r, err := authz.Query(context.Background(), authz.QueryRequest{Project: f.c.Project, Mandate: f.mandate, ProjectPolicies: pps, Tools: tools, State: &state})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Permitted)+len(r.NotPermitted) != len(tools) {
			t.Fatalf("state %q: %d permitted + %d not permitted, want %d tools", state, len(r.Permitted), len(r.NotPermitted), len(tools))
		}
		for _, ta := range tools {
			for _, hem := range f.c.HEMIDs {
				d, err := f.gate.Decide(ctx, f.request(ta.ToolName, state, hem, "", f.token))
				if err != nil {
					t.Fatal(err)
				}
				if want := r.Allows(ta.ToolName, hem); d.Allowed != want {
					t.Errorf("state %q tool %s hem_id %q: residual says %v, gate says %v (%s)\nresidual: %+v", state, ta.ToolName, hem, want, d.Allowed, d.Reason, r.Permitted)
				}
				checked++
			}
		}
	}
	t.Logf("%d (state, tool, hem_id) triples agree", checked)
}

func TestQueryUnknownState(t *testing.T) {
	f := loadFixture(t)
	pps, _ := mandate.ParsePolicies("project", f.c.ProjectPolicies)
	r, err := authz.Query(context.Background(), authz.QueryRequest{Project: f.c.Project, Mandate: f.mandate, ProjectPolicies: pps,
		Tools: []authz.ToolAction{f.tools["atp_update_pre_arrangement"], f.tools["atp_record_safety_check"]}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Permitted) != 1 || !r.Permitted[0].Conditional || !strings.Contains(strings.Join(r.Permitted[0].Conditions, " "), `"PRE_JOURNEY"`) {
		t.Fatalf("permitted = %+v, want update_pre_arrangement conditional on PRE_JOURNEY", r.Permitted)
	}
	if len(r.NotPermitted) != 1 || r.NotPermitted[0] != "atp_record_safety_check" {
		t.Fatalf("not permitted = %v", r.NotPermitted)
	}
	for _, s := range []string{atpauthz.WindleyTemplateVersion, "Bound booking_object_id: bk-1", "atp_update_pre_arrangement", "HEM-MANDATE-01"} {
		if !strings.Contains(r.ContextBlock, s) {
			t.Errorf("context block lacks %q:\n%s", s, r.ContextBlock)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"ok", `permit(principal, action == ATPAction::"invoke_hem", resource) when { ["HEM-01"].contains(context.hem_id) };`, ""},
		{"syntax error names the line", "permit(principal, action, resource);\npermit(principal, action resource);", "policies: line 2, column 26: expected ','"},
		{"unknown context attribute", "permit(principal, action, resource);\npermit(principal, action, resource) when { context.booking_stat == \"X\" };", "policies: line 2, column 1: policy policy1"},
		{"type error", `permit(principal, action, resource) when { context.hem_id > 3 };`, "policy0"},
		{"unknown entity type", `permit(principal == User::"x", action, resource);`, "User"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := authz.ParseAndValidate("policies", tc.text)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}
