package registry_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/registry/registrytest"
)

func TestMemoryConformance(t *testing.T) {
	registrytest.Run(t, func(t *testing.T) registry.Registry {
		m := registry.NewMemory(nil)
		t.Cleanup(func() { m.Close() })
		return m
	})
}

func TestMemoryClosed(t *testing.T) {
	m := registry.NewMemory(func() time.Time { return time.Unix(0, 0) })
	m.Close()
	if _, err := m.Get(t.Context(), "p", "t"); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
	if _, err := m.Put(t.Context(), registrytest.NewEntry("p", "t")); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Put after Close: %v", err)
	}
}

func TestValidateOK(t *testing.T) {
	for _, mut := range []func(e *registry.Entry){
		func(e *registry.Entry) {},
		func(e *registry.Entry) { e.ToolName = "artifact.put" },
		func(e *registry.Entry) { e.ToolName = "A-b_c.9" },
		func(e *registry.Entry) { e.ToolName = strings.Repeat("t", 128); e.ProjectID = strings.Repeat("p", 128) },
		func(e *registry.Entry) { e.ToolName = "list_tools_v2" },
		func(e *registry.Entry) { e.AfterExecution = card.Terminate },
		func(e *registry.Entry) { e.Options = registry.Options{} },
		func(e *registry.Entry) { e.Options.TimeoutSeconds = 86400 },
		func(e *registry.Entry) { e.Options.CedarAction = `A::B::"x y"` },
		func(e *registry.Entry) { e.TargetSubject = "cg.v1r3.proj.ch.cmd.tool.echo" },
		func(e *registry.Entry) {
			e.TargetSubject = "cg.{PROTOCOL_VERSION}.{project_id}.{channel_id}.cmd.tool.search.call"
		},
		func(e *registry.Entry) {
			e.Parameters = json.RawMessage(`{"type":"object","$defs":{"s":{"type":"string"}},"properties":{"text":{"$ref":"#/$defs/s"}}}`)
			e.Options.Args.Fixed = map[string]json.RawMessage{"text": json.RawMessage(`"hi"`)}
		},
		func(e *registry.Entry) {
			e.Parameters = json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`)
		},
	} {
		e := registrytest.NewEntry("proj", "echo")
		mut(e)
		if err := registry.Validate(e); err != nil {
			t.Errorf("Validate(%s, %s): %v", e.ToolName, e.TargetSubject, err)
		}
	}
}

func TestValidateInvalid(t *testing.T) {
	if err := registry.Validate(nil); !errors.Is(err, registry.ErrInvalid) {
		t.Errorf("Validate(nil) = %v", err)
	}
	for _, c := range registrytest.Invalid {
		t.Run(c.Name, func(t *testing.T) {
			e := registrytest.NewEntry("proj", "echo")
			c.Mutate(e)
			err := registry.Validate(e)
			registrytest.CheckError(t, c, err)
			var fe *registry.FieldError
			if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, c.Field) {
				t.Errorf("FieldError.Field = %v, want %s", fe, c.Field)
			}
		})
	}
}

func TestValidateMessages(t *testing.T) {
	for _, tc := range []struct {
		mut  func(e *registry.Entry)
		want string
	}{
		{func(e *registry.Entry) { e.ToolName = "list_tools" }, `tool_name: "list_tools" is reserved for the built-in PMO tool`},
		{func(e *registry.Entry) {
			e.TargetSubject = "cg.{ver}.{project_id}.{channel_id}.cmd.sys.pmo.internal.echo"
		}, "only built-in tools may use cmd.sys.pmo.internal"},
		{func(e *registry.Entry) { e.AfterExecution = "pause" }, `after_execution: "pause" is not suspend|terminate`},
		{func(e *registry.Entry) {
			e.Parameters = json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","minimum":"one"}}}`)
		}, "/properties/n/minimum"},
	} {
		e := registrytest.NewEntry("proj", "echo")
		tc.mut(e)
		if err := registry.Validate(e); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate: %v, want message containing %q", err, tc.want)
		}
	}
}

func builtin(name, subject string) *registry.Entry {
	e := registrytest.NewEntry("proj", name)
	e.TargetSubject = subject
	return e
}

func TestValidateBuiltin(t *testing.T) {
	ok := builtin("list_tools", "cg.{ver}.{project_id}.{channel_id}.cmd.sys.pmo.internal.list_tools")
	if err := registry.ValidateBuiltin(ok); err != nil {
		t.Errorf("ValidateBuiltin(list_tools): %v", err)
	}
	if err := registry.Validate(ok); !errors.Is(err, registry.ErrReserved) {
		t.Errorf("Validate(list_tools) = %v, want ErrReserved", err)
	}
	for _, e := range []*registry.Entry{
		builtin("list_tools", "cg.{ver}.{project_id}.{channel_id}.cmd.tool.list_tools"),
		builtin("list_tools", "cg.{ver}.{project_id}.{channel_id}.cmd.sys.pmo.internal.mandate_query"),
		builtin("list_tools", "cg.{ver}.other.{channel_id}.cmd.sys.pmo.internal.list_tools"),
	} {
		err := registry.ValidateBuiltin(e)
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "target_subject") {
			t.Errorf("ValidateBuiltin(%s) = %v, want target_subject error", e.TargetSubject, err)
		}
	}
}

func TestReserved(t *testing.T) {
	names := registry.ReservedNames()
	if len(names) != 3 {
		t.Fatalf("ReservedNames = %v", names)
	}
	names[0] = "changed"
	if !registry.IsReserved("cancel_tool_call") || registry.IsReserved("changed") {
		t.Error("ReservedNames returned a shared slice")
	}
	for _, n := range []string{"list_tools", "LIST_TOOLS", "mandate_query"} {
		if !registry.IsReserved(n) {
			t.Errorf("IsReserved(%s) = false", n)
		}
	}
	if registry.IsReserved("list_tool") {
		t.Error("IsReserved(list_tool) = true")
	}
}

func TestOptionsJSON(t *testing.T) {
	in := `{"zeta":{"b":1},"timeout_seconds":1.5,"args":{"defaults":{"a":1},"fixed":{"b":"x"}},` +
		`"envs":{"K":"v"},"risk_level":"HIGH","confirmation":"when_multiple","cedar_action":"A::\"b\"",` +
		`"scopes":["s"],"max_deliveries":2,"alpha":[1,2]}`
	var o registry.Options
	if err := json.Unmarshal([]byte(in), &o); err != nil {
		t.Fatal(err)
	}
	if o.TimeoutSeconds != 1.5 || o.RiskLevel != registry.RiskHigh || o.MaxDeliveries != 2 ||
		string(o.Args.Fixed["b"]) != `"x"` || len(o.Extra) != 2 || o.Timeout() != 1500*time.Millisecond {
		t.Fatalf("decoded %+v", o)
	}
	out, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"alpha":[1,2],"args":{"defaults":{"a":1},"fixed":{"b":"x"}},"cedar_action":"A::\"b\"",` +
		`"confirmation":"when_multiple","envs":{"K":"v"},"max_deliveries":2,"risk_level":"HIGH",` +
		`"scopes":["s"],"timeout_seconds":1.5,"zeta":{"b":1}}`
	if string(out) != want {
		t.Errorf("Marshal =\n%s\nwant\n%s", out, want)
	}
	if d := (registry.Options{}).Timeout(); d != registry.DefaultTimeout {
		t.Errorf("default Timeout = %v", d)
	}
	if b, _ := json.Marshal(registry.Options{}); string(b) != `{}` {
		t.Errorf("empty options = %s", b)
	}
	if err := json.Unmarshal([]byte(`null`), &o); err != nil || o.Extra != nil {
		t.Errorf("null options: %v %+v", err, o)
	}
}

func TestOptionsJSONErrors(t *testing.T) {
	for in, field := range map[string]string{
		`{"timeout_seconds":"5"}`:         "options.timeout_seconds",
		`{"args":{"default":{}}}`:         "options.args",
		`{"args":{"fixed":[1]}}`:          "options.args.fixed",
		`{"args":3}`:                      "options.args",
		`{"envs":{"A":1}}`:                "options.envs",
		`{"scopes":"s"}`:                  "options.scopes",
		`{"max_deliveries":1.5}`:          "options.max_deliveries",
		`[]`:                              "options",
		`{"risk_level":["LOW","MEDIUM"]}`: "options.risk_level",
	} {
		var o registry.Options
		err := json.Unmarshal([]byte(in), &o)
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), field) {
			t.Errorf("Unmarshal(%s) = %v, want ErrInvalid naming %s", in, err, field)
		}
	}
}

func TestEntryJSON(t *testing.T) {
	e := registrytest.NewEntry("proj", "echo")
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "updated_at") {
		t.Errorf("zero updated_at marshaled: %s", b)
	}
	for _, k := range []string{"project_id", "tool_name", "description", "parameters", "target_subject", "after_execution", "options"} {
		if !strings.Contains(string(b), `"`+k+`":`) {
			t.Errorf("JSON lacks %s: %s", k, b)
		}
	}
	var back registry.Entry
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !registrytest.Equal(&back, e) {
		t.Errorf("round trip = %+v", back)
	}
	if c := (*registry.Entry)(nil).Clone(); c != nil {
		t.Error("nil Clone")
	}
}

func TestCheckKey(t *testing.T) {
	if err := registry.CheckKey("p", "artifact.put"); err != nil {
		t.Error(err)
	}
	if err := registry.CheckKey("p", "a b"); !errors.Is(err, registry.ErrInvalid) {
		t.Error(err)
	}
	if err := registry.NotFound("p", "t"); !errors.Is(err, registry.ErrNotFound) || !strings.Contains(err.Error(), `"t"`) {
		t.Error(err)
	}
}
