package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
	"github.com/utpmesh/utpmesh/subjects"
)

// pingProject is the project and channel token of the probe a node sends
// on its own subject at start (is the name taken?).
const pingProject = "_cynode"

// Ops of a node request.
const (
	opPing = "ping"
	opCall = "call"
)

// nodeRequest is a request on a node's subject: a probe, or a call
// forwarded by the worker that took it.
type nodeRequest struct {
	Op string `json:"op"`
	// Incarnation is the holder's, as the record has it (a call for
	// another incarnation is answered node_restarted).
	Incarnation string           `json:"incarnation,omitempty"`
	Tool        string           `json:"tool,omitempty"`
	ChannelID   string           `json:"channel_id,omitempty"`
	TaskID      string           `json:"task_id,omitempty"`
	RunID       string           `json:"run_id,omitempty"`
	JobID       string           `json:"job_id,omitempty"`
	Identity    gateway.Identity `json:"identity"`
	Args        json.RawMessage  `json:"args,omitempty"`
	Now         time.Time        `json:"now"`
	Limits      gateway.Limits   `json:"limits"`
	// Deadline is the call's: the holder stops the tool then.
	Deadline time.Time `json:"deadline"`
	// AgentTurnID and ToolCallID name the call in the holder's logs.
	AgentTurnID string `json:"agent_turn_id,omitempty"`
	ToolCallID  string `json:"tool_call_id,omitempty"`
}

// nodeReply is a node's answer: who it is, and a forwarded call's result
// or error.
type nodeReply struct {
	Node        string          `json:"node"`
	Incarnation string          `json:"incarnation"`
	Started     time.Time       `json:"started"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       *gateway.Error  `json:"error,omitempty"`
}

// NodeStats is a node's STATS data (MicroService's endpoint): its
// sandboxes and capacity, read when asked.
type NodeStats struct {
	Node        string        `json:"node"`
	Incarnation string        `json:"incarnation"`
	Started     time.Time     `json:"started"`
	Sandboxes   []SandboxInfo `json:"sandboxes"`
	Capacity    Capacity      `json:"capacity"`
}

// SandboxInfo is one sandbox a node holds.
type SandboxInfo struct {
	ProjectID string    `json:"project_id"`
	TaskID    string    `json:"task_id"`
	JobID     string    `json:"job_id"`
	ImageRef  string    `json:"image_ref"`
	CreatedAt time.Time `json:"created_at"`
}

// Capacity is what a node offers its sandboxes: the host's CPUs and the
// free space under its sandbox directory, the calls running in its
// sandboxes now, and each sandbox's limits.
type Capacity struct {
	CallsRunning     int64   `json:"calls_running"`
	CPUs             int     `json:"cpus"`
	DiskFreeBytes    uint64  `json:"disk_free_bytes"`
	LimitsEnforcedBy string  `json:"limits_enforced_by"`
	SandboxCPUs      float64 `json:"sandbox_cpus"`
	MemoryBytes      int64   `json:"memory_bytes"`
	MaxProcs         int     `json:"max_procs"`
	JobDirBytes      int64   `json:"job_dir_bytes"`
	TimeoutMS        int     `json:"timeout_ms"`
}

// register adds the node's micro service: one endpoint on the node's
// subject, in every project and channel.
func (l *locality) register() error {
	subj, err := subjects.NodeServicePattern(l.cfg.Version, SubjectService, l.node)
	if err != nil {
		return err
	}
	svc, err := micro.AddService(l.nc, micro.Config{
		Name: MicroService, Version: "1.0.0",
		Description: "CyNodeAI sandbox node: serves the sandbox calls forwarded to the worker that holds the sandbox; STATS data lists its sandboxes and capacity",
		Metadata:    map[string]string{"node": l.node, "incarnation": l.inc},
		StatsHandler: func(*micro.Endpoint) any {
			return l.stats()
		},
	})
	if err != nil {
		return fmt.Errorf("cynode sandbox: register micro service %s: %w", MicroService, err)
	}
	if err := svc.AddEndpoint("sandbox", micro.HandlerFunc(l.handle), micro.WithEndpointSubject(subj)); err != nil {
		_ = svc.Stop()
		return fmt.Errorf("cynode sandbox: node endpoint %s: %w", subj, err)
	}
	// The server has the node's subscription before Serve returns: a
	// request right after finds it.
	fctx, cancel := deadline.Within(context.Background(), 0)
	defer cancel()
	if err := l.nc.FlushWithContext(fctx); err != nil {
		_ = svc.Stop()
		return fmt.Errorf("cynode sandbox: node endpoint %s: %w", subj, err)
	}
	l.stopMu.Lock()
	defer l.stopMu.Unlock()
	if l.stopped { // the service closed while the node started
		_ = svc.Stop()
		return errors.New("cynode sandbox: the service is closed")
	}
	l.svc = svc
	return nil
}

// stats reads the node's sandboxes and capacity.
func (l *locality) stats() NodeStats {
	s := l.s
	st := NodeStats{Node: l.node, Incarnation: l.inc, Started: l.started, Sandboxes: []SandboxInfo{}}
	dirs, _ := os.ReadDir(s.root)
	for _, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(s.root, d.Name(), "meta.json"))
		var m meta
		if err != nil || json.Unmarshal(raw, &m) != nil {
			continue
		}
		st.Sandboxes = append(st.Sandboxes, SandboxInfo{ProjectID: m.ProjectID, TaskID: m.TaskID, JobID: m.JobID, ImageRef: m.ImageRef, CreatedAt: m.CreatedAt})
	}
	sort.Slice(st.Sandboxes, func(i, j int) bool { return st.Sandboxes[i].CreatedAt.Before(st.Sandboxes[j].CreatedAt) })
	by, _ := s.LimitsEnforcedBy()
	c := s.cfg
	st.Capacity = Capacity{CallsRunning: l.running.Load(), CPUs: runtime.NumCPU(), LimitsEnforcedBy: by,
		SandboxCPUs: c.CPUs, MemoryBytes: c.MemoryBytes, MaxProcs: c.MaxProcs, JobDirBytes: c.JobDirBytes, TimeoutMS: c.TimeoutMS}
	var fs syscall.Statfs_t
	if syscall.Statfs(s.root, &fs) == nil {
		st.Capacity.DiskFreeBytes = fs.Bavail * uint64(fs.Bsize)
	}
	return st
}

// handle answers a request on the node's subject. A call runs in its own
// goroutine: a long exec does not hold up the others.
func (l *locality) handle(req micro.Request) {
	var r nodeRequest
	if err := json.Unmarshal(req.Data(), &r); err != nil {
		l.respond(req, nodeReply{Error: gateway.Errorf(gateway.TypeInvalidArgument, "a node request is JSON {op, …}: %v", err)})
		return
	}
	switch r.Op {
	case opPing:
		l.respond(req, nodeReply{})
	case opCall:
		project := projectOf(req.Subject())
		go func() { l.respond(req, l.serveCall(project, r)) }()
	default:
		l.respond(req, nodeReply{Error: gateway.Errorf(gateway.TypeInvalidArgument, "node request op %q: use %s or %s", r.Op, opPing, opCall)})
	}
}

func (l *locality) respond(req micro.Request, rep nodeReply) {
	rep.Node, rep.Incarnation, rep.Started = l.node, l.inc, l.started
	raw, err := json.Marshal(rep)
	if err != nil {
		raw, _ = json.Marshal(nodeReply{Node: l.node, Incarnation: l.inc, Started: l.started, Error: gateway.Errorf(gateway.TypeInternal, "the result does not encode: %v", err)})
	}
	if err := req.Respond(raw); err != nil {
		l.log().Warn("cynode sandbox: answering a forwarded call", "node", l.node, "err", err)
	}
}

// projectOf is the project token of a node subject
// (cg.<ver>.<project>.…).
func projectOf(subject string) string {
	parts := strings.SplitN(subject, ".", 4)
	if len(parts) < 4 {
		return ""
	}
	return parts[2]
}

// serveCall runs a forwarded call here, with this node's limits, until
// the call's deadline.
func (l *locality) serveCall(project string, r nodeRequest) nodeReply {
	if r.Incarnation != l.inc {
		return nodeReply{Error: gateway.Errorf(gateway.TypeUnavailable, "the sandbox of job %s lived on node %s, which has restarted since (a start removes the sandboxes left behind); create a new sandbox with sandbox.create", r.JobID, l.node).
			With(map[string]any{"node": l.node, "reason": "node_restarted"})}
	}
	f := l.s.forwardable(r.Tool)
	if f == nil {
		return nodeReply{Error: gateway.Errorf(gateway.TypeInvalidArgument, "tool %q is not forwarded to a sandbox's node", r.Tool)}
	}
	if r.Deadline.IsZero() {
		return nodeReply{Error: gateway.Errorf(gateway.TypeInvalidArgument, "a forwarded call carries its deadline")}
	}
	ctx, cancel := context.WithDeadline(context.Background(), r.Deadline)
	defer cancel()
	call := &worker.Call{Version: l.cfg.Version, ProjectID: project, ChannelID: r.ChannelID, ToolName: r.Tool, Arguments: r.Args,
		Command: utp.Command{AgentID: r.Identity.AgentID, AgentTurnID: r.AgentTurnID, ToolCallID: r.ToolCallID, ToolName: r.Tool}}
	x := &gateway.Exec{Call: call, Identity: r.Identity, Project: project, TaskID: r.TaskID, RunID: r.RunID, JobID: r.JobID,
		Args: r.Args, Now: r.Now, Limits: r.Limits, Store: l.cfg.Store, Conn: l.cfg.Conn}
	v, err := l.local(ctx, x, f)
	if err != nil {
		var ge *gateway.Error
		if !errors.As(err, &ge) {
			ge = gateway.Errorf(gateway.TypeInternal, "%v", err)
		}
		return nodeReply{Error: ge}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nodeReply{Error: gateway.Errorf(gateway.TypeInternal, "the result does not encode: %v", err)}
	}
	return nodeReply{Result: raw}
}

// probe asks a node who it is, within ProbeTimeout.
func (l *locality) probe(ctx context.Context, project, channel, node string) (nodeReply, error) {
	subj, err := subjects.NodeService(l.cfg.Version, project, channel, SubjectService, node)
	if err != nil {
		return nodeReply{}, err
	}
	pctx, cancel := deadline.Within(ctx, ProbeTimeout)
	defer cancel()
	raw, _ := json.Marshal(nodeRequest{Op: opPing})
	msg, err := deadline.Request(pctx, l.nc, subj, raw)
	if err != nil {
		return nodeReply{}, err
	}
	var rep nodeReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return nodeReply{}, fmt.Errorf("node %s answered %q: %w", node, msg.Data, err)
	}
	return rep, nil
}

// forward sends the call to the node that holds the sandbox and returns
// its answer. A node that is gone fails the call at once (gone,
// restarted).
func (l *locality) forward(ctx context.Context, x *gateway.Exec, tool string, r record) (any, error) {
	channel := x.Call.ChannelID
	p, err := l.probe(ctx, x.Project, channel, r.Node)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, gone(x, r, "no worker serves it: it stopped or lost the mesh")
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return nil, gone(x, r, fmt.Sprintf("it did not answer a probe within %v", ProbeTimeout))
	case err != nil:
		return nil, gateway.Errorf(gateway.TypeUnavailable, "reaching node %s, which holds the sandbox of job %s: %v", r.Node, x.JobID, err)
	case p.Incarnation != r.Incarnation:
		return nil, restarted(x, r)
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(time.Duration(l.s.cfg.TimeoutMS)*time.Millisecond + deadline.Default)
	}
	req := nodeRequest{Op: opCall, Incarnation: r.Incarnation, Tool: tool, ChannelID: channel, TaskID: x.TaskID, RunID: x.RunID, JobID: x.JobID,
		Identity: x.Identity, Args: x.Args, Now: x.Now, Limits: x.Limits, Deadline: dl,
		AgentTurnID: x.Call.Command.AgentTurnID, ToolCallID: x.Call.Command.ToolCallID}
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeInternal, "forwarding: %v", err)
	}
	subj, err := subjects.NodeService(l.cfg.Version, x.Project, channel, SubjectService, r.Node)
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeInternal, "node subject: %v", err)
	}
	rctx, cancel := context.WithDeadline(ctx, dl)
	defer cancel()
	msg, err := deadline.Request(rctx, l.nc, subj, raw)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, gone(x, r, "it stopped while the call was sent")
	case errors.Is(err, nats.ErrMaxPayload):
		return nil, gateway.Errorf(gateway.TypeSizeLimit, "the call is too large to forward to node %s (%d bytes, over the mesh's NATS max payload)", r.Node, len(raw))
	case err != nil:
		return nil, gateway.Errorf(gateway.TypeUnavailable, "node %s, which holds the sandbox of job %s, did not answer: %v", r.Node, x.JobID, err)
	}
	var rep nodeReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return nil, gateway.Errorf(gateway.TypeInternal, "node %s answered %q: %v", r.Node, msg.Data, err)
	}
	if rep.Error != nil {
		return nil, rep.Error
	}
	return rep.Result, nil
}
