// Package cynode is the CyNodeAI catalogue: the tool surface of an agent
// orchestrator (the CyNodeAI MCP tool catalog seed) served behind a
// gateway that enforces allowlists, access control, size limits and
// auditing without adding anything to the tool calls themselves.
//
// One service, "cynode" in services/catalog (`utpmesh up --services
// ...,cynode`, `utpmesh worker --data DIR cynode`), serves every tool,
// because the tools share one store (tasks scope artifacts, skills and
// help) and one gateway:
//
//	artifact  artifact.put artifact.get artifact.list
//	db        db.task.get|update_status db.job.get|update_status
//	          db.system_setting.get|list|create|update|delete
//	          db.preference.get|list|create|update|delete|effective
//	          db.project.get|list
//	model     model.list model.get
//	skills    skills.create|list|get|update|delete
//	node      node.list node.get node.refresh_config
//	help      help.get
//	web       web.fetch web.search
//	api       api.call
//	sandbox   sandbox.create|exec|put_file|get_file|stream_logs|destroy
//	          sandbox.allowed_images.list|add
//	git       git.repo.validate git.branch.create git.changeset.apply
//	          git.commit.create git.push git.pr.create (default deny)
//
// Commands go to cg.<ver>.<project>.<channel>.cmd.tool.cynode.<tool name>;
// every tool registers cedar_action Action::"mcp.tool.invoke", so the
// mesh's Cedar gate and the gateway's own access policies speak of the
// same action (with context.tool naming the tool).
//
// # The gateway (internal/gateway)
//
// Every call passes, in order: identity (the mandate in the tool.call
// card verifies against the project's issuer key and names the calling
// agent; the agent type pm, pa or sandbox comes from the operator's
// registration of that agent id in cynode.json, never from arguments),
// admin-disabled tools, the agent type's allowlist and the tool's scope,
// the Cedar access policies (principal Agent::"<id>" in its Group and Role
// entities, action Action::"mcp.tool.invoke", resource McpTool::"<tool>"),
// size limits on the arguments, and task scoping (task_id must name a task
// of the calling project). Anything missing refuses the call. Results are
// the seed's response model, {"status":"success","result":…}; refusals and
// failures are failed tool.results whose error detail is
// {"status":"error","error":{type,message,details}}. Every call leaves an
// audit record (package audit) with ids, decision, status, duration and
// error type, never the arguments or the result.
//
// # Egress (internal/egress, package web)
//
// The web tools and api.call reach the network only through internal/egress: no proxy
// from the environment, every address a name resolves to checked (public
// unicast only: no loopback, private, link-local/metadata, CGNAT,
// reserved or multicast), the checked address dialed and checked again at
// connect, redirects returned to the caller and followed one hop at a
// time against the project's policy. Tests reach local servers through
// egress.Hooks (Deps.TestEgress), a type only code under services/cynode
// can name, so no configuration file can lift the checks.
//
// # Data
//
// <DataDir>/cynode.db (package store, bbolt; the Store interface is what a
// PostgreSQL backend would implement) and <DataDir>/cynode.json (the
// configuration; DemoConfig is written there when it is missing). Mandate
// keys are read from <DataDir>/keys, where `utpmesh up` keeps them.
// <DataDir>/images is the sandboxes' local image store (imported by
// sandbox.images or Service.ImportImage), <DataDir>/sandboxes their work
// dirs, <DataDir>/git the task clones (removed when the task is
// terminal) and the local pull requests.
//
// # Caveats
//
// cynode.json is read at start (a change needs a restart). An audit record that cannot be stored
// is logged and the call's result stands. A worker of this service needs
// the project's issuer key under its data directory (a `utpmesh worker`
// on another host refuses every call until the key is there).
package cynode
