package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/utpmesh/utpmesh/services/cynode/store"
)

// AgentType is the kind of agent calling: the CyNodeAI gateway's PM
// (project manager), PA (project analyst) or sandbox (worker agent).
type AgentType string

// Agent types.
const (
	PM      AgentType = "pm"
	PA      AgentType = "pa"
	Sandbox AgentType = "sandbox"
)

// AgentTypes lists every agent type.
var AgentTypes = []AgentType{PM, PA, Sandbox}

// Scope is a tool's per-tool scope: which side may call it.
type Scope string

// Scopes.
const (
	ScopeSandbox Scope = "sandbox"
	ScopePM      Scope = "pm"
	ScopeBoth    Scope = "both"
)

// Admits reports whether a tool of scope s may be called by agent type t:
// sandbox agents need sandbox or both, PM and PA agents pm or both.
func (s Scope) Admits(t AgentType) bool {
	if s == ScopeBoth {
		return true
	}
	if t == Sandbox {
		return s == ScopeSandbox
	}
	return s == ScopePM
}

// Agent is an operator's registration of an agent id: its type and the
// user, groups and roles it acts for.
type Agent struct {
	Type AgentType `json:"type"`
	// User is the user the agent acts for (PA and sandbox agents; a PM
	// agent is system-level and has none).
	User   string   `json:"user,omitempty"`
	Groups []string `json:"groups,omitempty"`
	Roles  []string `json:"roles,omitempty"`
	// Projects are the projects the agent's user is authorized for
	// (db.project.get/list return only these); the calling project always
	// counts.
	Projects []string `json:"projects,omitempty"`
}

// Limits bound what a call may send and receive. Zero fields take the
// defaults (DefaultLimits).
type Limits struct {
	// MaxInputBytes bounds a call's encoded arguments.
	MaxInputBytes int `json:"max_input_bytes,omitempty"`
	// MaxTextBytes bounds every string in the arguments.
	MaxTextBytes int `json:"max_text_bytes,omitempty"`
	// MaxResponseBytes bounds the encoded result.
	MaxResponseBytes int `json:"max_response_bytes,omitempty"`
	// MaxArtifactBytes bounds one artifact's content (decoded).
	MaxArtifactBytes int `json:"max_artifact_bytes,omitempty"`
	// MaxListLimit bounds the limit of a list call.
	MaxListLimit int `json:"max_list_limit,omitempty"`
}

// DefaultLimits are the limits when the configuration sets none. The
// mesh's own card and payload limits are higher; these keep one call
// small enough to audit and to put into an LLM's context.
var DefaultLimits = Limits{
	MaxInputBytes:    1 << 20,
	MaxTextBytes:     256 << 10,
	MaxResponseBytes: 1 << 20,
	MaxArtifactBytes: 512 << 10,
	MaxListLimit:     100,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxInputBytes > 0 {
		d.MaxInputBytes = l.MaxInputBytes
	}
	if l.MaxTextBytes > 0 {
		d.MaxTextBytes = l.MaxTextBytes
	}
	if l.MaxResponseBytes > 0 {
		d.MaxResponseBytes = l.MaxResponseBytes
	}
	if l.MaxArtifactBytes > 0 {
		d.MaxArtifactBytes = l.MaxArtifactBytes
	}
	if l.MaxListLimit > 0 {
		d.MaxListLimit = l.MaxListLimit
	}
	return d
}

// Config is the gateway's operator configuration (cynode.json in the data
// directory).
type Config struct {
	// Agents registers agent ids (the mandate's sub) with their type.
	// An agent that is not registered is refused.
	Agents map[string]Agent `json:"agents"`
	// Allowlists overrides DefaultAllowlists per agent type (patterns:
	// a tool name, or "prefix.*").
	Allowlists map[AgentType][]string `json:"allowlists,omitempty"`
	// DisabledTools are refused whatever the allowlists and policies say.
	DisabledTools []string `json:"disabled_tools,omitempty"`
	// AccessPolicies is the Cedar policy set evaluated on
	// Action::"mcp.tool.invoke" with resource McpTool::"<tool>". Empty
	// means every call is refused (fail closed).
	AccessPolicies string `json:"access_policies"`
	// Limits bound inputs and responses.
	Limits Limits `json:"limits,omitempty"`
	// Models is the operator-managed model registry (model.list, model.get).
	Models []Model `json:"models,omitempty"`
	// Seed lists projects, tasks and jobs the service stores when it
	// starts (when they do not exist yet). Part 1 has no User API Gateway
	// that creates tasks; this is how an operator (and the demo) gets them.
	Seed Seed `json:"seed,omitempty"`
	// Web configures web.fetch and web.search.
	Web WebConfig `json:"web,omitempty"`
	// API declares the providers of api.call.
	API APIConfig `json:"api,omitempty"`
	// Git registers the repositories of git.*.
	Git GitConfig `json:"git,omitempty"`
	// Sandbox configures sandbox.*.
	Sandbox SandboxConfig `json:"sandbox,omitempty"`
}

// Seed is data stored at start when absent.
type Seed struct {
	Projects []store.Project `json:"projects,omitempty"`
	Tasks    []store.Task    `json:"tasks,omitempty"`
	Jobs     []store.Job     `json:"jobs,omitempty"`
}

// Model is one entry of the model registry.
type Model struct {
	ID            string   `json:"model_id"`
	Provider      string   `json:"provider"`
	DisplayName   string   `json:"display_name,omitempty"`
	Capabilities  []string `json:"capabilities,omitempty"`
	ContextTokens int      `json:"context_tokens,omitempty"`
	// Available says whether the model may be routed to now.
	Available bool `json:"available"`
}

// Config returns the gateway's configuration (read it only).
func (g *Gateway) Config() *Config { return g.cfg }

// DefaultAllowlists are the role allowlists of the CyNodeAI gateway spec
// (mcp_gateway_enforcement.md), restricted to the tools this catalogue
// serves. Sandbox agents get no db.*, node.*, sandbox.*, model.*; PA agents
// read the database but write nothing.
var DefaultAllowlists = map[AgentType][]string{
	PM: {"artifact.*", "db.*", "node.*", "model.*", "skills.*", "help.*", "web.*", "api.call", "sandbox.*"},
	PA: {"artifact.*", "help.*", "skills.list", "skills.get", "web.*",
		"db.task.get", "db.job.get", "db.system_setting.get", "db.system_setting.list",
		"db.preference.get", "db.preference.list", "db.preference.effective", "db.project.get", "db.project.list"},
	Sandbox: {"artifact.*", "help.*", "skills.list", "skills.get", "web.*", "api.call"},
}

// Allows reports whether a pattern list admits tool.
func Allows(patterns []string, tool string) bool {
	for _, p := range patterns {
		if p == tool || p == "*" {
			return true
		}
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(tool, prefix) {
			return true
		}
	}
	return false
}

// allowlist returns the allowlist of t.
func (c *Config) allowlist(t AgentType) []string {
	if l, ok := c.Allowlists[t]; ok {
		return l
	}
	return DefaultAllowlists[t]
}

// Validate checks the configuration and says what to fix.
func (c *Config) Validate() error {
	ids := make([]string, 0, len(c.Agents))
	for id := range c.Agents {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if !slices.Contains(AgentTypes, c.Agents[id].Type) {
			return fmt.Errorf("cynode config: agent %q has type %q; use one of pm, pa, sandbox", id, c.Agents[id].Type)
		}
	}
	seen := map[string]bool{}
	for i, m := range c.Models {
		if m.ID == "" || m.Provider == "" {
			return fmt.Errorf("cynode config: models[%d] needs model_id and provider", i)
		}
		if seen[m.ID] {
			return fmt.Errorf("cynode config: model %q is listed twice", m.ID)
		}
		seen[m.ID] = true
	}
	if err := c.Web.Validate(); err != nil {
		return err
	}
	if err := c.API.Validate(); err != nil {
		return err
	}
	if err := c.Git.Validate(); err != nil {
		return err
	}
	if err := c.Sandbox.Validate(); err != nil {
		return err
	}
	for t := range c.Allowlists {
		if !slices.Contains(AgentTypes, t) {
			return fmt.Errorf("cynode config: allowlists has agent type %q; use pm, pa or sandbox", t)
		}
	}
	return nil
}

// LoadConfig reads a JSON configuration file.
func LoadConfig(path string) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cynode config: %w", err)
	}
	var c Config
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("cynode config %s: %w (see docs/catalogues/cynode.md for the fields)", path, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// Apply stores the seed's objects that do not exist yet.
func (s Seed) Apply(ctx context.Context, st store.Store) error {
	for _, p := range s.Projects {
		if _, err := st.GetProject(ctx, p.ID); errors.Is(err, store.ErrNotFound) {
			if err := st.PutProject(ctx, p); err != nil {
				return fmt.Errorf("cynode config seed: project %s: %w", p.ID, err)
			}
		}
	}
	for _, t := range s.Tasks {
		if _, err := st.GetTask(ctx, t.ID); errors.Is(err, store.ErrNotFound) {
			if err := st.PutTask(ctx, t); err != nil {
				return fmt.Errorf("cynode config seed: task %s: %w", t.ID, err)
			}
		}
	}
	for _, j := range s.Jobs {
		if _, err := st.GetJob(ctx, j.ID); errors.Is(err, store.ErrNotFound) {
			if err := st.PutJob(ctx, j); err != nil {
				return fmt.Errorf("cynode config seed: job %s: %w", j.ID, err)
			}
		}
	}
	return nil
}
