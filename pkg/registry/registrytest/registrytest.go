// Package registrytest is the conformance suite for registry.Registry
// implementations. Every implementation's tests call Run:
//
//	func TestConformance(t *testing.T) {
//		registrytest.Run(t, func(t *testing.T) registry.Registry { return newStore(t) })
//	}
//
// newRegistry must return a fresh, empty registry per call and arrange its
// cleanup with t.Cleanup. The suite does not assume a particular clock.
package registrytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
)

// NewEntry returns a valid entry for project and tool, with a tool command
// subject template, a small schema and every typed option set.
func NewEntry(project, tool string) *registry.Entry {
	return &registry.Entry{
		ProjectID:      project,
		ToolName:       tool,
		Description:    "Echo the text back.",
		Parameters:     json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"},"times":{"type":"integer","minimum":1}},"required":["text"]}`),
		TargetSubject:  "cg.{ver}.{project_id}.{channel_id}.cmd.tool.echo",
		AfterExecution: card.Suspend,
		Options: registry.Options{
			TimeoutSeconds: 12.5,
			Args: registry.Args{
				Defaults: map[string]json.RawMessage{"times": json.RawMessage(`1`)},
			},
			Envs:          map[string]string{"ECHO_PREFIX": ">"},
			RiskLevel:     registry.RiskLow,
			Confirmation:  registry.ConfirmNever,
			CedarAction:   `ATPAction::"echo"`,
			Scopes:        []string{"tools:echo"},
			MaxDeliveries: 3,
			Extra:         map[string]json.RawMessage{"ui_allowed": json.RawMessage(`true`)},
		},
	}
}

// Case is one invalid definition: Mutate breaks a valid entry; the error
// must match ErrInvalid (and ErrReserved when Reserved) and its message
// must contain Field.
type Case struct {
	Name     string
	Field    string
	Reserved bool
	Mutate   func(e *registry.Entry)
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// Invalid lists one case per validation rule of registry.Validate.
var Invalid = []Case{
	{"empty project", "project_id", false, func(e *registry.Entry) { e.ProjectID = "" }},
	{"project with dot", "project_id", false, func(e *registry.Entry) { e.ProjectID = "a.b" }},
	{"project too long", "project_id", false, func(e *registry.Entry) { e.ProjectID = strings.Repeat("p", 129) }},
	{"project wildcard", "project_id", false, func(e *registry.Entry) { e.ProjectID = "*" }},
	{"empty tool_name", "tool_name", false, func(e *registry.Entry) { e.ToolName = "" }},
	{"tool_name space", "tool_name", false, func(e *registry.Entry) { e.ToolName = "my tool" }},
	{"tool_name slash", "tool_name", false, func(e *registry.Entry) { e.ToolName = "a/b" }},
	{"tool_name NUL", "tool_name", false, func(e *registry.Entry) { e.ToolName = "a\x00b" }},
	{"tool_name too long", "tool_name", false, func(e *registry.Entry) { e.ToolName = strings.Repeat("t", 129) }},
	{"reserved list_tools", "tool_name", true, func(e *registry.Entry) { e.ToolName = "list_tools" }},
	{"reserved cancel_tool_call", "tool_name", true, func(e *registry.Entry) { e.ToolName = "cancel_tool_call" }},
	{"reserved mandate_query", "tool_name", true, func(e *registry.Entry) { e.ToolName = "mandate_query" }},
	{"reserved any case", "tool_name", true, func(e *registry.Entry) { e.ToolName = "List_Tools" }},
	{"description not UTF-8", "description", false, func(e *registry.Entry) { e.Description = "\xff" }},
	{"after_execution empty", "after_execution", false, func(e *registry.Entry) { e.AfterExecution = "" }},
	{"after_execution pause", "after_execution", false, func(e *registry.Entry) { e.AfterExecution = "pause" }},
	{"target_subject empty", "target_subject", false, func(e *registry.Entry) { e.TargetSubject = "" }},
	{"target_subject garbage", "target_subject", false, func(e *registry.Entry) { e.TargetSubject = "not a subject" }},
	{"target_subject wildcard", "target_subject", false, func(e *registry.Entry) { e.TargetSubject = "cg.{ver}.{project_id}.*.cmd.tool.echo" }},
	{"target_subject misplaced placeholder", "target_subject", false, func(e *registry.Entry) { e.TargetSubject = "cg.{ver}.{project_id}.{channel_id}.cmd.tool.{tool_name}" }},
	{"target_subject event", "target_subject", false, func(e *registry.Entry) { e.TargetSubject = "cg.{ver}.{project_id}.{channel_id}.evt.tool.echo" }},
	{"target_subject agent", "target_subject", false, func(e *registry.Entry) { e.TargetSubject = "cg.{ver}.{project_id}.{channel_id}.cmd.agent.a1.wakeup" }},
	{"target_subject pmo", "target_subject", false, func(e *registry.Entry) {
		e.TargetSubject = "cg.{ver}.{project_id}.{channel_id}.cmd.sys.pmo.internal.echo"
	}},
	{"target_subject other project", "target_subject", false, func(e *registry.Entry) { e.TargetSubject = "cg.{ver}.other.{channel_id}.cmd.tool.echo" }},
	{"parameters missing", "parameters", false, func(e *registry.Entry) { e.Parameters = nil }},
	{"parameters null", "parameters", false, func(e *registry.Entry) { e.Parameters = raw(`null`) }},
	{"parameters array", "parameters", false, func(e *registry.Entry) { e.Parameters = raw(`[]`) }},
	{"parameters not JSON", "parameters", false, func(e *registry.Entry) { e.Parameters = raw(`{"type":`) }},
	{"parameters no type", "parameters", false, func(e *registry.Entry) { e.Parameters = raw(`{"properties":{}}`) }},
	{"parameters type string", "parameters", false, func(e *registry.Entry) { e.Parameters = raw(`{"type":"string"}`) }},
	{"parameters bad keyword value", "parameters", false, func(e *registry.Entry) {
		e.Parameters = raw(`{"type":"object","properties":{"x":{"type":"strung"}}}`)
	}},
	{"parameters bad regex", "parameters", false, func(e *registry.Entry) {
		e.Parameters = raw(`{"type":"object","properties":{"x":{"type":"string","pattern":"("}}}`)
	}},
	{"parameters external ref", "parameters", false, func(e *registry.Entry) {
		e.Parameters = raw(`{"type":"object","properties":{"x":{"$ref":"file:///etc/passwd"}}}`)
	}},
	{"timeout negative", "options.timeout_seconds", false, func(e *registry.Entry) { e.Options.TimeoutSeconds = -1 }},
	{"timeout over 24h", "options.timeout_seconds", false, func(e *registry.Entry) { e.Options.TimeoutSeconds = 86401 }},
	{"default bad JSON", "options.args.defaults", false, func(e *registry.Entry) {
		e.Options.Args.Defaults = map[string]json.RawMessage{"times": raw(`{`)}
	}},
	{"default violates property", "options.args.defaults.times", false, func(e *registry.Entry) {
		e.Options.Args.Defaults = map[string]json.RawMessage{"times": raw(`"three"`)}
	}},
	{"fixed violates property", "options.args.fixed.text", false, func(e *registry.Entry) {
		e.Options.Args.Fixed = map[string]json.RawMessage{"text": raw(`42`)}
	}},
	{"fixed not allowed", "options.args.fixed.other", false, func(e *registry.Entry) {
		e.Parameters = raw(`{"type":"object","properties":{"text":{"type":"string"}},"additionalProperties":false}`)
		e.Options.Args = registry.Args{Fixed: map[string]json.RawMessage{"other": raw(`1`)}}
	}},
	{"key in defaults and fixed", "options.args", false, func(e *registry.Entry) {
		e.Options.Args.Fixed = map[string]json.RawMessage{"times": raw(`2`)}
	}},
	{"env key", "options.envs", false, func(e *registry.Entry) { e.Options.Envs = map[string]string{"1BAD": "x"} }},
	{"risk level", "options.risk_level", false, func(e *registry.Entry) { e.Options.RiskLevel = "low" }},
	{"confirmation", "options.confirmation", false, func(e *registry.Entry) { e.Options.Confirmation = "sometimes" }},
	{"cedar unquoted", "options.cedar_action", false, func(e *registry.Entry) { e.Options.CedarAction = "ATPAction::get" }},
	{"cedar no namespace", "options.cedar_action", false, func(e *registry.Entry) { e.Options.CedarAction = `"get"` }},
	{"scope empty", "options.scopes[1]", false, func(e *registry.Entry) { e.Options.Scopes = []string{"a", ""} }},
	{"scope space", "options.scopes[0]", false, func(e *registry.Entry) { e.Options.Scopes = []string{"a b"} }},
	{"scope duplicate", "options.scopes[1]", false, func(e *registry.Entry) { e.Options.Scopes = []string{"a", "a"} }},
	{"max_deliveries negative", "options.max_deliveries", false, func(e *registry.Entry) { e.Options.MaxDeliveries = -1 }},
	{"max_deliveries over 100", "options.max_deliveries", false, func(e *registry.Entry) { e.Options.MaxDeliveries = 101 }},
	{"extra shadows typed", "options.scopes", false, func(e *registry.Entry) {
		e.Options.Extra = map[string]json.RawMessage{"scopes": raw(`[]`)}
	}},
	{"extra bad JSON", "options.ui", false, func(e *registry.Entry) {
		e.Options.Extra = map[string]json.RawMessage{"ui": raw(`nope`)}
	}},
}

// CheckError fails t unless err fits c.
func CheckError(t testing.TB, c Case, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got nil error", c.Name)
	}
	if !errors.Is(err, registry.ErrInvalid) {
		t.Errorf("%s: error %q does not match ErrInvalid", c.Name, err)
	}
	if got := errors.Is(err, registry.ErrReserved); got != c.Reserved {
		t.Errorf("%s: errors.Is(err, ErrReserved) = %v, want %v (%q)", c.Name, got, c.Reserved, err)
	}
	if !strings.Contains(err.Error(), c.Field) {
		t.Errorf("%s: error %q does not name field %s", c.Name, err, c.Field)
	}
}

// Equal reports whether a and b are the same definition: equal fields,
// JSON values compared by meaning rather than spelling. UpdatedAt is
// compared with time.Time.Equal.
func Equal(a, b *registry.Entry) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.UpdatedAt.Equal(b.UpdatedAt) && sameJSON(a, b)
}

// sameJSON compares a and b (UpdatedAt aside) through their JSON.
func sameJSON(a, b *registry.Entry) bool {
	norm := func(e *registry.Entry) any {
		c := e.Clone()
		c.UpdatedAt = time.Time{}
		data, err := json.Marshal(c)
		if err != nil {
			return err.Error()
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			return err.Error()
		}
		return v
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// Run runs the conformance suite against registries from newRegistry.
func Run(t *testing.T, newRegistry func(t *testing.T) registry.Registry) {
	ctx := context.Background()

	t.Run("PutGet", func(t *testing.T) {
		r := newRegistry(t)
		in := NewEntry("proj", "echo")
		before := in.Clone()
		got, err := r.Put(ctx, in)
		if err != nil {
			t.Fatalf("Put: %v", err)
		}
		if !sameJSON(in, before) || !in.UpdatedAt.IsZero() {
			t.Errorf("Put modified its argument")
		}
		if got.UpdatedAt.IsZero() {
			t.Errorf("Put did not set updated_at")
		}
		if got.UpdatedAt.Location().String() != "UTC" {
			t.Errorf("updated_at %v is not UTC", got.UpdatedAt)
		}
		if !sameJSON(got, in) {
			t.Errorf("Put returned %+v, want %+v", got, in)
		}
		back, err := r.Get(ctx, "proj", "echo")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if !Equal(back, got) {
			t.Errorf("Get = %+v, want %+v", back, got)
		}
		if string(back.Options.Extra["ui_allowed"]) != "true" {
			t.Errorf("options extra key lost: %v", back.Options.Extra)
		}
		// Returned values are copies.
		back.Options.Envs["ECHO_PREFIX"] = "changed"
		back.Options.Scopes[0] = "changed"
		again, err := r.Get(ctx, "proj", "echo")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if !Equal(again, got) {
			t.Errorf("mutating a returned entry changed the store")
		}
	})

	t.Run("Update", func(t *testing.T) {
		r := newRegistry(t)
		first, err := r.Put(ctx, NewEntry("proj", "echo"))
		if err != nil {
			t.Fatalf("Put: %v", err)
		}
		upd := NewEntry("proj", "echo")
		upd.Description = "Echo, version 2."
		upd.AfterExecution = card.Terminate
		upd.Options = registry.Options{}
		second, err := r.Put(ctx, upd)
		if err != nil {
			t.Fatalf("Put update: %v", err)
		}
		if second.UpdatedAt.Before(first.UpdatedAt) {
			t.Errorf("updated_at went back: %v then %v", first.UpdatedAt, second.UpdatedAt)
		}
		got, err := r.Get(ctx, "proj", "echo")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if !sameJSON(got, upd) {
			t.Errorf("update did not replace the entry: got %+v", got)
		}
		if got.Options.Envs != nil || got.Options.Extra != nil || got.Options.TimeoutSeconds != 0 {
			t.Errorf("old options survived the update: %+v", got.Options)
		}
		list, err := r.List(ctx, "proj")
		if err != nil || len(list) != 1 {
			t.Fatalf("List after update = %d entries, %v; want 1", len(list), err)
		}
	})

	t.Run("ListSorted", func(t *testing.T) {
		r := newRegistry(t)
		list, err := r.List(ctx, "proj")
		if err != nil {
			t.Fatalf("List empty: %v", err)
		}
		if list == nil || len(list) != 0 {
			t.Errorf("List of empty project = %#v, want empty non-nil", list)
		}
		names := []string{"web_search", "artifact.put", "Zeta", "artifact", "echo", "artifact-get", "a_b"}
		for _, n := range names {
			if _, err := r.Put(ctx, NewEntry("proj", n)); err != nil {
				t.Fatalf("Put %s: %v", n, err)
			}
		}
		list, err = r.List(ctx, "proj")
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		var got []string
		for _, e := range list {
			got = append(got, e.ToolName)
		}
		want := []string{"Zeta", "a_b", "artifact", "artifact-get", "artifact.put", "echo", "web_search"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("List order = %v, want %v", got, want)
		}
	})

	t.Run("ProjectIsolation", func(t *testing.T) {
		r := newRegistry(t)
		// "p" is a prefix of "p-1" and "p_": listing p must not see them.
		for _, p := range []string{"p", "p-1", "p_", "q"} {
			e := NewEntry(p, "echo")
			e.Description = "in " + p
			if _, err := r.Put(ctx, e); err != nil {
				t.Fatalf("Put %s: %v", p, err)
			}
		}
		if _, err := r.Put(ctx, NewEntry("p-1", "only_p1")); err != nil {
			t.Fatalf("Put: %v", err)
		}
		list, err := r.List(ctx, "p")
		if err != nil || len(list) != 1 || list[0].ProjectID != "p" || list[0].Description != "in p" {
			t.Fatalf("List(p) = %+v, %v; want the one entry of p", list, err)
		}
		if _, err := r.Get(ctx, "p", "only_p1"); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("Get(p, only_p1) err = %v, want ErrNotFound", err)
		}
		if err := r.Delete(ctx, "p", "echo"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		for _, p := range []string{"p-1", "p_", "q"} {
			e, err := r.Get(ctx, p, "echo")
			if err != nil || e.Description != "in "+p {
				t.Errorf("Get(%s, echo) after deleting p/echo = %+v, %v", p, e, err)
			}
		}
		if list, _ := r.List(ctx, "p-1"); len(list) != 2 {
			t.Errorf("List(p-1) has %d entries, want 2", len(list))
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		r := newRegistry(t)
		if _, err := r.Get(ctx, "proj", "nope"); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("Get missing: err = %v, want ErrNotFound", err)
		}
		if err := r.Delete(ctx, "proj", "nope"); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("Delete missing: err = %v, want ErrNotFound", err)
		}
		if _, err := r.Put(ctx, NewEntry("proj", "echo")); err != nil {
			t.Fatalf("Put: %v", err)
		}
		if err := r.Delete(ctx, "proj", "echo"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if err := r.Delete(ctx, "proj", "echo"); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("second Delete: err = %v, want ErrNotFound", err)
		}
		if _, err := r.Get(ctx, "proj", "echo"); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("Get after Delete: err = %v, want ErrNotFound", err)
		}
	})

	t.Run("BadKeys", func(t *testing.T) {
		r := newRegistry(t)
		for _, k := range [][2]string{{"", "echo"}, {"a.b", "echo"}, {"proj", ""}, {"proj", "a\x00b"}, {"proj", "a b"}} {
			if _, err := r.Get(ctx, k[0], k[1]); !errors.Is(err, registry.ErrInvalid) {
				t.Errorf("Get(%q, %q) err = %v, want ErrInvalid", k[0], k[1], err)
			}
			if err := r.Delete(ctx, k[0], k[1]); !errors.Is(err, registry.ErrInvalid) {
				t.Errorf("Delete(%q, %q) err = %v, want ErrInvalid", k[0], k[1], err)
			}
		}
		if _, err := r.List(ctx, "a\x00"); !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("List(bad project) err = %v, want ErrInvalid", err)
		}
	})

	t.Run("Validation", func(t *testing.T) {
		r := newRegistry(t)
		if _, err := r.Put(ctx, nil); !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("Put(nil) err = %v, want ErrInvalid", err)
		}
		for _, c := range Invalid {
			e := NewEntry("proj", "echo")
			c.Mutate(e)
			_, err := r.Put(ctx, e)
			CheckError(t, c, err)
		}
		if list, err := r.List(ctx, "proj"); err != nil || len(list) != 0 {
			t.Errorf("invalid entries were stored: %d, %v", len(list), err)
		}
	})

	t.Run("ConcreteSubjects", func(t *testing.T) {
		r := newRegistry(t)
		for i, s := range []string{
			"cg.v1r3.proj.ch1.cmd.tool.echo",
			"cg.{PROTOCOL_VERSION}.proj.{channel_id}.cmd.tool.search.call",
			"cg.v1r3.{project_id}.ch1.cmd.tool.echo.v2",
		} {
			e := NewEntry("proj", fmt.Sprintf("t%d", i))
			e.TargetSubject = s
			if _, err := r.Put(ctx, e); err != nil {
				t.Errorf("Put with target_subject %s: %v", s, err)
			}
		}
	})

	t.Run("Canceled", func(t *testing.T) {
		r := newRegistry(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := r.Put(cctx, NewEntry("proj", "echo")); !errors.Is(err, context.Canceled) {
			t.Errorf("Put with canceled ctx: err = %v, want context.Canceled", err)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		r := newRegistry(t)
		var wg sync.WaitGroup
		const n = 8
		errs := make(chan error, n*3)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("tool_%d", i)
				if _, err := r.Put(ctx, NewEntry("proj", name)); err != nil {
					errs <- err
					return
				}
				if _, err := r.Get(ctx, "proj", name); err != nil {
					errs <- err
				}
				if _, err := r.List(ctx, "proj"); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if list, err := r.List(ctx, "proj"); err != nil || len(list) != n {
			t.Errorf("List = %d entries, %v; want %d", len(list), err, n)
		}
	})
}
