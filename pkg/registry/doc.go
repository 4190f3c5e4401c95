// Package registry is the resource.tools registry of utpmesh: the table of
// tool definitions that tells the mesh which tools a project has, what
// arguments they take and which NATS subject their commands go to.
//
// # Entries
//
// An Entry is one row of resource.tools (UTP seed §2). Its JSON form is
//
//	{
//	  "project_id":      "demo",
//	  "tool_name":       "echo",
//	  "description":     "Echo the text back.",
//	  "parameters":      {"type": "object", "properties": {"text": {"type": "string"}}},
//	  "target_subject":  "cg.{ver}.{project_id}.{channel_id}.cmd.tool.echo",
//	  "after_execution": "suspend",
//	  "options":         {"timeout_seconds": 10},
//	  "updated_at":      "2026-03-01T12:00:00Z"
//	}
//
// The (project_id, tool_name) pair is the key: each project has its own
// namespace of tool names. updated_at is not part of the seed's field list;
// the store sets it (UTC) on every Put and ignores any value sent.
//
// # Validation rules
//
// Validate (called by every Registry.Put) refuses a definition with a
// *FieldError naming the field, matching ErrInvalid:
//
//   - project_id: 1 to 128 bytes of [A-Za-z0-9_-], the rules of a subject
//     token, because it is one.
//   - tool_name: 1 to 128 bytes of [A-Za-z0-9_.-]; dots are allowed
//     ("artifact.put"). The built-in PMO names list_tools,
//     cancel_tool_call and mandate_query are reserved (compared ignoring
//     ASCII case) and refused with an error that also matches ErrReserved.
//   - description: free text, valid UTF-8, at most 64 KiB. It is shown to
//     the model; write it for the model.
//   - after_execution: "suspend" or "terminate" (see card.AfterExecution).
//     It is copied into the tool command; a tool result may still override
//     it with result.__cg_control.after_execution.
//   - target_subject: a subject template as parsed by
//     subjects.ParseTemplate. The ver position may be "{ver}" or
//     "{PROTOCOL_VERSION}", the project position "{project_id}", the channel
//     position "{channel_id}"; any of them may instead be concrete. It must
//     be a tool command (cg.<ver>.<project>.<channel>.cmd.tool.<target>[.…]).
//     cmd.sys.pmo.internal.* subjects are refused ("only built-in tools may
//     use cmd.sys.pmo.internal"). A concrete project must equal project_id.
//   - parameters: required; a JSON object with "type": "object" (call
//     arguments are always an object) that compiles as a JSON Schema with
//     google/jsonschema-go (standard library only, the library of the Go
//     MCP SDK): draft 2020-12, or draft-07 when "$schema" names it (other
//     drafts are refused), at most 256 KiB, self-contained ("$ref" to files
//     or URLs is refused; references inside the document work; a $ref
//     cycle that never descends into the value is refused). Keyword shapes
//     are checked ("minLength": -1 is refused at /minLength). "format" is
//     an annotation, not asserted. A refused argument names the instance
//     path of its first violation, what was wrong, and how many other
//     violations there are: "arguments/title: expected string, got number
//     (and 1 more violation)".
//   - options: see Options. timeout_seconds in [0, 86400] (0 = 30 s);
//     args.defaults and args.fixed are objects of valid JSON values, a key
//     may not be in both, and each value must satisfy the schema of its
//     property (or be allowed by additionalProperties); envs keys match
//     [A-Za-z_][A-Za-z0-9_]* and values contain no NUL; risk_level is
//     "", LOW, MEDIUM or HIGH; confirmation is "", never, always or
//     when_multiple; cedar_action is empty or shaped Namespace::"name"
//     (namespaces may nest: A::B::"n"); scopes are non-empty, unique, at
//     most 256 bytes, without white space; max_deliveries is 0 (mesh
//     default) or 1..100; principal is empty (agents) or "operator"
//     (operator-only tools). Other keys are kept verbatim in Options.Extra.
//
// ValidateBuiltin applies the same rules to the mesh's own built-in tools,
// except that reserved names are allowed and the subject must be
// cg.<ver>.<project>.<channel>.cmd.sys.pmo.internal.<tool_name>.
//
// # Arguments
//
// CompileSchema compiles parameters once; (*Schema).Validate checks the
// arguments of each call and names the JSON pointer of the first violation
// ("arguments/title: expected string, got number"), matching ErrArgs.
// ApplyArgs merges options.args into the arguments: defaults fill missing
// keys, fixed keys override the caller. Apply ApplyArgs first, then
// validate the result, so fixed values cannot be bypassed.
//
// # YAML
//
// ParseYAML imports CommonGround-style YAML definitions: a list of tools,
// a "tools:" mapping holding the list, or one tool per document (as
// CommonGround's examples/tools/*.yaml files are written), with "name"
// accepted for "tool_name". Errors name the item and field, e.g.
// `tools[2].after_execution: "pause" is not suspend|terminate`.
//
// # Caveats
//
//   - The registry does not check that something listens on the target
//     subject; a tool can be registered before its service starts.
//   - Templates are validated for shape only: rendering happens at call
//     time with the caller's channel.
//   - CommonGround defines some PMO tools (e.g. provision_agent) with a
//     cmd.sys.pmo.internal subject in YAML; in utpmesh only the mesh may
//     serve those, so such YAML is refused by ParseYAML.
//   - List order is byte order of tool_name ("Zeta" sorts before "alpha").
//   - Options.Extra keys are opaque to the mesh.
package registry
