// Package skills is the CyNodeAI skills tools (skills.create, list, get,
// update, delete) as the public CyNodeAI skills spec defines them
// (skills_storage_and_inference.md, "Skill Tools via MCP"): every tool
// takes task_id (for user context); create takes content and optional
// name and scope (user, group, project, global; default user); list
// returns metadata without content, filtered by scope and owner; get
// returns content; update takes content, name, scope; update and delete
// need the owner (or role skills.admin).
//
// Visibility: a user skill to its owner, a group skill to members of its
// group (the creator's first group), a project skill to callers in its
// project, a global skill to everyone. Scopes above user need the role
// skills.elevate in the agent's registration. The owner is the agent's
// user, or "agent:<agent_id>" for an agent without one (PM).
//
// Content and name are scanned before they are stored (Scan): hidden
// instructions (HTML comments; zero-width, bidirectional-control and tag
// characters), instruction overrides and secret or security bypasses are refused with
// error type policy_violation naming the category and the exact text.
package skills

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
	"github.com/utpmesh/utpmesh/services/cynode/store"
)

// Tool names.
const (
	ToolCreate = "skills.create"
	ToolList   = "skills.list"
	ToolGet    = "skills.get"
	ToolUpdate = "skills.update"
	ToolDelete = "skills.delete"
)

// Roles that widen what a caller may do.
const (
	RoleElevate = "skills.elevate"
	RoleAdmin   = "skills.admin"
)

// Scopes of a skill.
var Scopes = []string{"user", "group", "project", "global"}

// Finding is one match of the content scan.
type Finding struct {
	Category string `json:"category"`
	Match    string `json:"match"`
}

var rules = []struct {
	category string
	re       *regexp.Regexp
}{
	// HTML comments, zero-width characters, bidirectional controls and
	// Unicode tag characters (text an editor does not show).
	{"hidden_instructions", regexp.MustCompile(`(?s)<!--.*?-->|[\x{200B}\x{200C}\x{200D}\x{2060}\x{FEFF}\x{202A}-\x{202E}\x{2066}-\x{2069}\x{E0000}-\x{E007F}]`)},
	{"instruction_override", regexp.MustCompile(`(?i)\b(ignore|disregard|override|forget)\b[^.\n]{0,40}\b(previous|prior|above|earlier|other|all|system)\b[^.\n]{0,40}\b(instructions?|prompts?|rules|guidelines)\b`)},
	{"secret_bypass", regexp.MustCompile(`(?i)\b(reveal|output|print|expose|leak|send)\b[^.\n]{0,40}\b(api[ _-]?keys?|secrets?|passwords?|tokens?|credentials)\b|\bbypass\b[^.\n]{0,40}\b(access controls?|security|safety|authori[sz]ation)\b`)},
}

// Scan returns what in content violates the skill content policy.
func Scan(content string) []Finding {
	var out []Finding
	for _, r := range rules {
		for _, m := range r.re.FindAllString(content, 3) {
			out = append(out, Finding{Category: r.category, Match: m})
		}
	}
	return out
}

const (
	contentSchema = `{"type":"string","minLength":1,"description":"markdown"}`
	nameSchema    = `{"type":"string","minLength":1,"maxLength":200}`
	scopeSchema   = `{"type":"string","enum":["user","group","project","global"]}`
)

func params(required []string, props string) string {
	r := `"task_id"`
	for _, x := range required {
		r += `,"` + x + `"`
	}
	return `{"type":"object","additionalProperties":false,"required":[` + r + `],"properties":{"task_id":` + gateway.IDSchema + `,` + props + `}}`
}

// Specs are the skills tools.
func Specs() []gateway.Spec {
	return []gateway.Spec{
		{Name: ToolCreate, Description: "Stores a skill (markdown) after scanning it; scope user by default. Returns its skill_id.", Scope: gateway.ScopePM, TaskScoped: true,
			Params: params([]string{"content"}, `"content":`+contentSchema+`,"name":`+nameSchema+`,"scope":`+scopeSchema), Run: create},
		{Name: ToolList, Description: "Lists the skills the caller may see (metadata, no content), filtered by scope and owner.", Scope: gateway.ScopeBoth, TaskScoped: true,
			Params: params(nil, `"scope":`+scopeSchema+`,"owner":{"type":"string","maxLength":256},`+gateway.PageSchema), Run: list},
		{Name: ToolGet, Description: "Returns a skill's content and metadata.", Scope: gateway.ScopeBoth, TaskScoped: true,
			Params: params([]string{"skill_id"}, `"skill_id":`+gateway.IDSchema), Run: get},
		{Name: ToolUpdate, Description: "Updates a skill's content (scanned again), name or scope; owner or skills.admin only.", Scope: gateway.ScopePM, TaskScoped: true,
			Params: params([]string{"skill_id"}, `"skill_id":`+gateway.IDSchema+`,"content":`+contentSchema+`,"name":`+nameSchema+`,"scope":`+scopeSchema), Run: update},
		{Name: ToolDelete, Description: "Deletes a skill; owner or skills.admin only.", Scope: gateway.ScopePM, TaskScoped: true,
			Params: params([]string{"skill_id"}, `"skill_id":`+gateway.IDSchema), Run: remove},
	}
}

func owner(x *gateway.Exec) string {
	if x.Identity.User != "" {
		return x.Identity.User
	}
	return "agent:" + x.Identity.AgentID
}

func visible(x *gateway.Exec, sk store.Skill) bool {
	switch sk.Scope {
	case "user":
		return sk.Owner == owner(x)
	case "group":
		return slices.Contains(x.Identity.Groups, sk.ScopeID)
	case "project":
		return sk.ScopeID == x.Project
	case "global":
		return true
	}
	return false
}

// place resolves the scope id of scope for the caller, checking the
// elevation permission.
func place(x *gateway.Exec, scope string) (string, error) {
	if scope == "" || scope == "user" {
		return owner(x), nil
	}
	if !slices.Contains(x.Identity.Roles, RoleElevate) {
		return "", gateway.Errorf(gateway.TypeAccessDenied, "scope %s needs the role %s in the agent's registration; use scope user", scope, RoleElevate)
	}
	switch scope {
	case "group":
		if len(x.Identity.Groups) == 0 {
			return "", gateway.Errorf(gateway.TypeInvalidArgument, "scope group: the agent's registration names no group; use scope user or project")
		}
		return x.Identity.Groups[0], nil
	case "project":
		return x.Project, nil
	}
	return "", nil
}

// scan applies the content policy to a skill's content and name
// (either may be nil); the error names the field.
func scan(content, name *string) error {
	for _, fld := range []struct {
		what string
		text *string
	}{{"content", content}, {"name", name}} {
		if fld.text == nil {
			continue
		}
		if f := Scan(*fld.text); len(f) > 0 {
			return gateway.Errorf(TypePolicyViolation, "the skill %s was refused: %s: %q; remove that text and try again", fld.what, strings.ReplaceAll(f[0].Category, "_", " "), f[0].Match).
				With(map[string]any{"field": fld.what, "findings": f})
		}
	}
	return nil
}

// TypePolicyViolation is the error type of refused skill content.
const TypePolicyViolation = gateway.TypePolicyViolation

func digest(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }

func defaultName(content string) string {
	for _, line := range strings.Split(content, "\n") {
		if t := strings.TrimSpace(strings.TrimLeft(line, "#")); t != "" {
			if len(t) > 200 {
				// Cut at a character boundary: the name stays valid UTF-8.
				n := 200
				for n > 0 && !utf8.RuneStart(t[n]) {
					n--
				}
				t = t[:n]
			}
			return t
		}
	}
	return "skill"
}

type args struct {
	Content *string `json:"content"`
	Name    *string `json:"name"`
	Scope   *string `json:"scope"`
	SkillID string  `json:"skill_id"`
	Owner   string  `json:"owner"`
	Limit   int     `json:"limit"`
	Cursor  string  `json:"cursor"`
}

func create(ctx context.Context, x *gateway.Exec) (any, error) {
	var a args
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	if a.Content == nil {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "skills.create needs content (the skill's markdown)")
	}
	if err := scan(a.Content, a.Name); err != nil {
		return nil, err
	}
	scope := "user"
	if a.Scope != nil {
		scope = *a.Scope
	}
	sid, err := place(x, scope)
	if err != nil {
		return nil, err
	}
	name := defaultName(*a.Content)
	if a.Name != nil {
		name = *a.Name
	}
	// The id derives from the call, so a redelivered call stores the same
	// skill again rather than a second one.
	id := "skill_" + digest(x.Project + "\x00" + x.Call.Command.AgentTurnID + "\x00" + x.Call.Command.ToolCallID)[:16]
	sk := store.Skill{ID: id, Name: name, Scope: scope, ScopeID: sid, Owner: owner(x), Content: *a.Content, SHA256: digest(*a.Content),
		Version: 1, CreatedAt: x.Now, UpdatedAt: x.Now}
	if err := x.Store.PutSkill(ctx, sk); err != nil {
		return nil, err
	}
	sk.Content = ""
	return sk, nil
}

// load reads a skill the caller may see (others are not found).
func load(ctx context.Context, x *gateway.Exec, id string) (store.Skill, error) {
	sk, err := x.Store.GetSkill(ctx, id)
	if err != nil || !visible(x, sk) {
		return store.Skill{}, gateway.Errorf(gateway.TypeNotFound, "no skill %q among the skills the caller may see (skills.list shows them)", id)
	}
	return sk, nil
}

func mayChange(x *gateway.Exec, sk store.Skill) error {
	if sk.Owner == owner(x) || slices.Contains(x.Identity.Roles, RoleAdmin) {
		return nil
	}
	return gateway.Errorf(gateway.TypeAccessDenied, "skill %s belongs to %s: only its owner (or role %s) may change it", sk.ID, sk.Owner, RoleAdmin)
}

func list(ctx context.Context, x *gateway.Exec) (any, error) {
	var a args
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	page, err := x.Page(a.Limit, a.Cursor)
	if err != nil {
		return nil, err
	}
	out, next, err := x.Store.ListSkills(ctx, func(sk store.Skill) bool {
		return visible(x, sk) && (a.Scope == nil || sk.Scope == *a.Scope) && (a.Owner == "" || sk.Owner == a.Owner)
	}, page)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Content = ""
	}
	if out == nil {
		out = []store.Skill{}
	}
	return map[string]any{"skills": out, "next_cursor": next}, nil
}

func get(ctx context.Context, x *gateway.Exec) (any, error) {
	var a args
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	return load(ctx, x, a.SkillID)
}

func update(ctx context.Context, x *gateway.Exec) (any, error) {
	var a args
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	sk, err := load(ctx, x, a.SkillID)
	if err != nil {
		return nil, err
	}
	if err := mayChange(x, sk); err != nil {
		return nil, err
	}
	if a.Content == nil && a.Name == nil && a.Scope == nil {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "nothing to update: pass content, name or scope")
	}
	if err := scan(a.Content, a.Name); err != nil {
		return nil, err
	}
	if a.Content != nil {
		sk.Content, sk.SHA256 = *a.Content, digest(*a.Content)
	}
	if a.Name != nil {
		sk.Name = *a.Name
	}
	if a.Scope != nil && *a.Scope != sk.Scope {
		sid, err := place(x, *a.Scope)
		if err != nil {
			return nil, err
		}
		if *a.Scope == "user" {
			// A user skill is its owner's, whoever moves it (skills.admin).
			sid = sk.Owner
		}
		sk.Scope, sk.ScopeID = *a.Scope, sid
	}
	sk.Version++
	sk.UpdatedAt = x.Now
	if err := x.Store.PutSkill(ctx, sk); err != nil {
		return nil, err
	}
	sk.Content = ""
	return sk, nil
}

func remove(ctx context.Context, x *gateway.Exec) (any, error) {
	var a args
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	sk, err := load(ctx, x, a.SkillID)
	if err != nil {
		return nil, err
	}
	if err := mayChange(x, sk); err != nil {
		return nil, err
	}
	if err := x.Store.DeleteSkill(ctx, sk.ID); err != nil {
		return nil, err
	}
	return map[string]any{"deleted": sk.ID}, nil
}
