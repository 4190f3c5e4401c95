// Package authz is the mesh's authorization: every tool call is checked by
// Cedar (cedar-go) before its handler runs, deny by default.
//
// # Model
//
// A request is principal Agent::"<agent_id>", the tool's action (ActionOf:
// the registry's cedar_action, e.g. ATPAction::"invoke_hem", or
// Action::"<tool_name>"), the call's resource and the context record
// CallContext: tool, required_scopes, and the registered catalogues'
// String attributes (always present; "" means none).
//
// # Catalogues
//
// The core knows no catalogue. A catalogue contributes a Catalogue: its
// SchemaFragment (entity types, children of Project; context attributes;
// actions every project's policies may name; which attribute holds the
// resource's state and which a Windley query enumerates) and its entity
// loader (ResourceResolver: a call's resource, e.g. Booking::"<id>", and
// its context values, from the call's arguments, the mandate's binding
// and the catalogue's own state). The mesh assembly registers catalogues
// (RegisterCatalogue; mesh.AuthConfig.Catalogues) and gives the gate its
// resolvers (GateConfig.Resources); without one the resource is
// Project::"<project>". Optional DenialDecorator and ContextRenderer add a
// catalogue's denial body and Windley context block. The ATP catalogue's
// is services/atp/atpauthz.
//
// # The gate
//
// Gate (a worker.Authorizer) allows a call only when the project's policy
// set (PolicySource: bbolt in policystore, managed over the authz svc by
// natsauthz) permits it AND the call's mandate (pkg/mandate; carried in
// the tool.call card's metadata.mandate) verifies and its policy set
// permits it. A project without a policy set denies everything; a project
// whose config says mandate "not_required" (an explicit opt-out) is
// decided by its policies alone. PMO built-ins need a valid mandate but no
// Cedar permission. Every decision is audited (Auditor) without arguments.
// Verified tokens and parsed policy sets are cached; the issuer key and
// expiry are checked on every call.
//
// # The Windley Loop
//
// Query partially evaluates both policy sets (x/exp/eval.PartialPolicy)
// for every tool with the catalogues' enumerated attributes (and an
// unknown state attribute) as unknowns and returns the residual: permitted
// tools, conditions that remain, and the values of the enumerated
// attribute that are permitted (string literals of the policies,
// confirmed by full authorization). The first registered ContextRenderer
// renders the Windley context block. The ATP corpus test
// (services/atp/atpauthz) checks that the residual agrees with the gate.
//
// # Validation
//
// ValidateFor (ParseAndValidateFor) checks a project's policy set before
// it is stored: syntax errors are explained in words with line and column
// (ExplainParseError); unknown actions (not an action of the project's
// tools, see ActionSource, nor a catalogue's), entity types and
// attributes are refused naming the nearest valid one; cedar-go's
// validator then checks types. Validate (mandates) accepts any action.
// DiffPolicies is the line diff the CLI shows before a replacement.
//
// # Caveats
//
// cedar-go's x/exp packages (partial evaluation, schema validation) are
// experimental upstream. Schemas only declare actions of type Action, so
// Validate rewrites T::"id" to Action::"T::id" for validation; an action
// entity in a policy condition (rather than its scope) fails validation.
package authz
