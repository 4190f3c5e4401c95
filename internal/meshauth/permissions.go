package meshauth

import (
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/utpmesh/utpmesh/pkg/creds"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// IdentityService is the svc token of the mesh's identity service
// (cg.<ver>.<project>.<channel>.svc.identity.<op>), which the operator may
// use besides the core and admin.
const IdentityService = "identity"

// LeaseOps are the CardStore's lease operations on keys that are not a
// tool call's, scoped to the service that owns the key:
// cg.<ver>.<project>.<channel>.svc.cardstore.<op>.<LeaseToken(service)>.
var LeaseOps = []string{"claim_key", "release_key", "get_claim"}

// LeaseToken is the subject token of service's lease namespace: the keys
// <service>/… (subjects.ToolToken of the service name).
func LeaseToken(service string) string { return subjects.ToolToken(service) }

// agentCardOps are the CardStore operations a project-wide agent identity
// may use on its project's plain subjects: every one but put_result,
// claim, release and the leases.
var agentCardOps = []string{"put", "get", "get_many", "list_turn", "find_result", "box_create", "box_append", "box_get", "list_turns", "get_claim"}

// AgentCardOps are the CardStore's agent-scoped operations
// (natsstore.AgentOps), on cg.<ver>.<p>.*.svc.cardstore.<op>.<agent>.
var AgentCardOps = []string{"put", "get", "get_many", "list_turn", "find_result", "box_create", "box_append", "box_get", "list_turns"}

// AgentInboxOps are the inbox's agent-scoped operations (inbox.AgentOps),
// on cg.<ver>.<p>.*.svc.inbox.<op>.<agent>.
var AgentInboxOps = []string{"list", "get", "ack", "set_epoch"}

// operatorCardReads are the agent-scoped CardStore reads of an operator's
// own agent id.
var operatorCardReads = []string{"get", "get_many", "list_turn", "find_result", "box_get", "list_turns"}

// agentScoped returns the agent-scoped subjects of ops of service for
// agent ("*": every agent) in project ("*": every project).
func agentScoped(ver, project, service, agent string, ops []string) []string {
	out := make([]string, 0, len(ops))
	for _, op := range ops {
		// The arguments are checked tokens (Identity.Validate) or "*".
		if s, err := subjects.AgentServiceAllow(ver, project, service, op, agent); err == nil {
			out = append(out, s)
		}
	}
	return out
}

// workerCardOps are the plain CardStore operations of a worker; claims,
// releases, results and leases are on its own tool-scoped subjects.
var workerCardOps = []string{"put", "get", "get_many", "list_turn", "find_result", "box_create", "box_append", "box_get", "list_turns"}

// readCardOps are the CardStore reads of an operator.
var readCardOps = []string{"get", "get_many", "list_turn", "find_result", "box_get", "list_turns", "get_claim"}

// Permissions returns what id may publish and subscribe to under protocol
// version ver; nil means everything (core, admin). id.Key must be set for
// every other role: its reply inboxes are creds.InboxPrefix(id.Key).
func Permissions(ver string, id Identity) *server.Permissions {
	switch id.Role {
	case RoleAgent:
		return agentPermissions(ver, id)
	case RoleWorker:
		return workerPermissions(ver, id)
	case RoleOperator:
		return operatorPermissions(ver, id)
	}
	return nil
}

// inbox is the subscribe permission of id's own reply inboxes.
func inbox(id Identity) string { return creds.InboxPrefix(id.Key) + ".>" }

// scopes returns cg.<ver>.<p>.*. for each project, or cg.<ver>.*.*. for
// none.
func scopes(ver string, projects []string) []string {
	if len(projects) == 0 {
		return []string{"cg." + ver + ".*.*."}
	}
	out := make([]string, 0, len(projects))
	for _, p := range projects {
		out = append(out, "cg."+ver+"."+p+".*.")
	}
	return out
}

// agentPermissions: a project-wide agent identity (no Agent) uses its
// project's plain CardStore and inbox subjects and every agent's scoped
// ones; a per-agent identity only its own agent's scoped subjects, on
// which the services serve that agent's cards and entries only. Both read
// the project's registry and policies.
func agentPermissions(ver string, id Identity) *server.Permissions {
	p := "cg." + ver + "." + id.Project + ".*."
	who := "*"
	if id.Agent != "" {
		who = subjects.ToolToken(id.Agent)
	}
	pub := []string{
		p + "svc." + subjects.DispatchService + "." + subjects.DispatchCallOp + "." + who,
		p + "svc." + subjects.DispatchService + "." + subjects.DispatchKeysOp,
		p + "svc.registry.get", p + "svc.registry.list",
		p + "svc.worker.*",
		"$SRV.>",
		"$JS.API.INFO",
	}
	if id.RawCommands {
		pub = append(pub, p+"cmd.tool.>", p+"cmd.sys.pmo.internal.*")
	}
	for _, op := range []string{"get", "config_get", "test", "query", "history", "history_get", "issuer_key"} {
		pub = append(pub, p+"svc.authz."+op)
	}
	agent := "*"
	if id.Agent != "" {
		agent = id.Agent
	} else {
		pub = append(pub, p+"svc.inbox.list", p+"svc.inbox.get", p+"svc.inbox.ack", p+"svc.inbox.set_epoch")
		for _, op := range agentCardOps {
			pub = append(pub, p+"svc.cardstore."+op)
		}
	}
	pub = append(pub, agentScoped(ver, id.Project, "cardstore", agent, AgentCardOps)...)
	pub = append(pub, agentScoped(ver, id.Project, "inbox", agent, AgentInboxOps)...)
	wake := "*"
	if id.Agent != "" {
		wake = id.Agent // agent ids in wakeup subjects are tokens (subjects.AgentWakeup)
	}
	// Its wakeup durable, which the core made (AgentDurables): bind,
	// fetch and acknowledge, never create, update or delete (a consumer's
	// filter is in the create request's body, which no permission sees).
	wakeStream := streams.WakeupStream(ver)
	for d := range AgentDurables(ver, id) {
		pub = append(pub,
			"$JS.API.CONSUMER.INFO."+wakeStream+"."+d,
			"$JS.API.CONSUMER.MSG.NEXT."+wakeStream+"."+d,
			"$JS.ACK."+wakeStream+"."+d+".>")
	}
	// Its project's state events (every service's, every resource's):
	// a Windley loop re-queries on a transition of its booking.
	events, _ := subjects.StateEventPattern(ver, id.Project, "*", "*")
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: []string{inbox(id), p + "cmd.agent." + wake + ".wakeup", events}},
	}
}

// stateEvents is the publish permission of a worker's state events: its
// own service's, in each of its projects (every project: "*").
func stateEvents(ver string, id Identity) []string {
	projects := id.Projects
	if len(projects) == 0 {
		projects = []string{"*"}
	}
	var out []string
	for _, p := range projects {
		if s, err := subjects.StateEventPattern(ver, p, id.Service, "*"); err == nil {
			out = append(out, s)
		}
	}
	return out
}

func workerPermissions(ver string, id Identity) *server.Permissions {
	cmd := streams.CommandStream(ver)
	pub := []string{"$JS.API.INFO"}
	// The core creates and updates every stream: a worker only checks
	// that they exist.
	for _, s := range []string{cmd, streams.WakeupStream(ver), streams.EventStream(ver)} {
		pub = append(pub, "$JS.API.STREAM.INFO."+s)
	}
	// Cancellation events and describe requests of every project, also
	// for a worker limited to projects: the SDK runtime subscribes to them
	// all (a cancellation carries a call's ids, a describe request
	// nothing; answering one of another project needs a registry read it
	// may not make).
	sub := []string{inbox(id), "$SRV.>", "cg." + ver + ".*.*.evt.sys.toolcall.cancel", "cg." + ver + ".*.*.svc.worker.*"}
	for _, a := range scopes(ver, id.Projects) {
		pub = append(pub,
			a+"cmd.sys.inbox.report", a+"svc.inbox.report",
			a+"evt.sys.deadletter.command",
			a+"evt.sys.authz.decision",
			a+"svc.registry.get", a+"svc.registry.list",
			a+"svc.authz.get", a+"svc.authz.config_get", a+"svc.authz.issuer_key",
			a+"svc."+subjects.DispatchService+"."+subjects.DispatchKeysOp)
		for _, op := range workerCardOps {
			pub = append(pub, a+"svc.cardstore."+op)
		}
		for _, t := range id.Tools {
			tok := subjects.ToolToken(t.Name)
			// The server checks the call and its claim against the
			// subject's tool.
			for _, op := range []string{"start_call", "claim", "release", "put_result"} {
				pub = append(pub, a+"svc.cardstore."+op+"."+tok)
			}
			// Registering its own tools at start; never another's, never delete.
			pub = append(pub, a+"svc.registry.put."+tok)
			// Create (in effect: update) its durable only with the tool's
			// own filter in the subject (the server refuses a body whose
			// filter differs); a worker limited to projects creates none.
			// The core made it (WorkerDurables).
			if len(id.Projects) == 0 {
				pub = append(pub, "$JS.API.CONSUMER.CREATE."+cmd+"."+streams.ToolConsumer(t.Name)+"."+a+"cmd.tool."+t.Target)
			}
		}
	}
	// Leases in the service's own namespace, in any project (ATLAS keeps
	// its holder lease in project _atlas): the server refuses a key
	// outside <service>/….
	for _, op := range LeaseOps {
		pub = append(pub, "cg."+ver+".*.*.svc.cardstore."+op+"."+LeaseToken(id.Service))
	}
	for _, t := range id.Tools {
		d := streams.ToolConsumer(t.Name)
		pub = append(pub,
			"$JS.API.CONSUMER.INFO."+cmd+"."+d,
			"$JS.API.CONSUMER.MSG.NEXT."+cmd+"."+d,
			// Acknowledgements (+ACK, +NAK, +TERM, +WPI) of its own
			// durable's deliveries only.
			"$JS.ACK."+cmd+"."+d+".>")
	}
	// The state events of its own service (subjects.StateEvent), and
	// no other service's.
	if id.Service != "" {
		pub = append(pub, stateEvents(ver, id)...)
	}
	pub, sub = append(pub, id.Publish...), append(sub, id.Subscribe...)
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: sub},
		// Micro discovery and describe requests are answered on the
		// requester's reply subject: one reply per request received, within
		// a minute. It opens no other identity's inbox or acknowledgement:
		// only the reply subject of a message this worker was delivered.
		Response: &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute},
	}
}

func operatorPermissions(ver string, id Identity) *server.Permissions {
	a := "cg." + ver + ".*.*."
	name := id.Operator
	if name == "" {
		name = DefaultOperator
	}
	pub := []string{
		a + "svc." + subjects.DispatchService + "." + subjects.DispatchOperatorOp + "." + subjects.ToolToken(name),
		a + "svc." + subjects.DispatchService + "." + subjects.DispatchKeysOp,
		a + "svc.registry.get", a + "svc.registry.list",
		a + "svc.inbox.list", a + "svc.inbox.get",
		a + "svc." + IdentityService + ".*",
		"$JS.API.INFO",
	}
	// Policies: the reads, and the signed writes (put, config_put,
	// rollback), which the authz service records under its name.
	for _, op := range []string{"get", "config_get", "test", "query", "history", "history_get", "issuer_key", "put", "config_put", "rollback"} {
		pub = append(pub, a+"svc.authz."+op)
	}
	for _, op := range readCardOps {
		pub = append(pub, a+"svc.cardstore."+op)
	}
	// Its own calls (agent id utp.OperatorAgentID) as an agent client
	// reads them, on that agent id's scoped subjects: the cards, and the
	// inbox entries, which it acks there (the plain ack, of any agent, it
	// may not use). And their wakeups only: a waiting call gets its result
	// at once.
	self := utp.OperatorAgentID(subjects.ToolToken(name))
	pub = append(pub, agentScoped(ver, "*", "cardstore", self, operatorCardReads)...)
	pub = append(pub, agentScoped(ver, "*", "inbox", self, []string{"list", "get", "ack"})...)
	wake := a + "cmd.agent." + self + ".wakeup"
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: []string{inbox(id), wake}},
	}
}

// WorkerDurables returns the durable consumer of each tool of a worker
// identity and its filters: the tool's command subject in each of its
// projects, cg.<ver>.<P>.*.cmd.tool.<target>, or in every project,
// cg.<ver>.*.*.cmd.tool.<target>. The mesh core creates them as pull
// consumers before the identity may connect: nats-server refuses to turn
// a pull consumer into a push one, so a worker cannot have its commands
// delivered on a subject of its choosing (it would not check a push
// consumer's deliver subject against the worker's permissions). A worker
// limited to projects may not create or update them at all; a tool has
// one worker identity, so no second durable overlaps them. Nil for any
// other identity.
func WorkerDurables(ver string, id Identity) map[string][]string {
	if id.Role != RoleWorker {
		return nil
	}
	out := map[string][]string{}
	for _, t := range id.Tools {
		var filters []string
		for _, a := range scopes(ver, id.Projects) {
			filters = append(filters, a+"cmd.tool."+t.Target)
		}
		out[streams.ToolConsumer(t.Name)] = filters
	}
	return out
}

// AgentDurables returns the durable wakeup consumer of an agent identity
// and its filter, on the wakeup stream (streams.WakeupStream): for a
// per-agent identity (agent-<P>.<A>) streams.AgentWakeupConsumer(P, A)
// filtered on cg.<ver>.<P>.*.cmd.agent.<A>.wakeup; for a project-wide one
// (agent-<P>) streams.AgentWakeupConsumer(P, "") filtered on
// cg.<ver>.<P>.*.cmd.agent.*.wakeup, every agent's wakeups of the project
// on one durable (a runtime hosting the project's agents tells them apart
// by the wakeup's agent_id). The mesh core creates them as pull consumers
// before the identity may connect; the identity may bind, fetch and
// acknowledge its own and never create a consumer on the wakeup stream:
// a consumer's filter travels in the request body, so a create permission
// would let it read any project's wakeups. Nil for any other identity.
func AgentDurables(ver string, id Identity) map[string][]string {
	if id.Role != RoleAgent {
		return nil
	}
	agent := "*"
	if id.Agent != "" {
		agent = id.Agent // agent ids in wakeup subjects are tokens (subjects.AgentWakeup)
	}
	filter, err := subjects.WakeupPattern(ver, id.Project, "*", agent)
	if err != nil { // Identity.Validate refuses what would fail here
		return nil
	}
	return map[string][]string{streams.AgentWakeupConsumer(id.Project, id.Agent): {filter}}
}
