package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox"
	"github.com/utpmesh/utpmesh/pkg/inbox/natsinbox"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/svc"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

func init() {
	register(spec{name: "status", order: 70, summary: "readiness (nodes, leaders, quorum, stalled assets), workers per tool, consumer lag, inbox depth; exits 1 when not ready",
		make: func(e env) command { return &statusCommand{env: e} }})
}

type statusCommand struct{ env env }

// statusReport is what `status --json` prints.
type statusReport struct {
	// Ready is false when JetStream does not answer, or a stream, bucket
	// or consumer has no leader or no quorum; Problems says why, and
	// status exits 1.
	Ready     bool             `json:"ready"`
	Problems  []string         `json:"problems"`
	Nodes     []nodeStatus     `json:"nodes"`
	Assets    []assetStatus    `json:"assets"`
	Workers   []workerStatus   `json:"workers"`
	Tools     []toolStatus     `json:"tools"`
	Stream    *streamStatus    `json:"stream"`
	Consumers []consumerStatus `json:"consumers"`
	Inbox     inboxStatus      `json:"inbox"`
}

type workerStatus struct {
	Instance        string    `json:"instance"`
	ServiceID       string    `json:"service_id"`
	Version         string    `json:"version"`
	ProtocolVersion string    `json:"protocol_version"`
	Projects        []string  `json:"projects"`
	Tools           []string  `json:"tools"`
	Started         time.Time `json:"started,omitzero"`
}

type toolStatus struct {
	Tool    string `json:"tool"`
	Workers int    `json:"workers"`
	worker.ToolStats
}

type streamStatus struct {
	Name     string `json:"name"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
}

type consumerStatus struct {
	Name           string   `json:"name"`
	FilterSubjects []string `json:"filter_subjects"`
	// Lag is NumPending: commands not yet delivered to any worker.
	Lag uint64 `json:"lag"`
	// Pending is NumAckPending: delivered, not yet acknowledged.
	Pending     int `json:"pending"`
	Redelivered int `json:"redelivered"`
	// Waiting is NumWaiting: pull requests of idle workers.
	Waiting int `json:"waiting"`
}

type inboxStatus struct {
	// UnprocessedReports is the inbox consumer's lag plus its unacknowledged
	// reports: results the inbox has not stored yet.
	UnprocessedReports uint64 `json:"unprocessed_reports"`
	// Agents are the pending (unconsumed) entries of each --agent.
	Agents []agentDepth `json:"agents"`
}

type agentDepth struct {
	ProjectID string `json:"project_id"`
	AgentID   string `json:"agent_id"`
	Pending   int    `json:"pending"`
}

func (c *statusCommand) Run(ctx context.Context, args []string) error {
	fs, mf := newMeshFlagSet("status", "utpmesh status [--agent A]... [--project P]... [--json]", c.env)
	var projects, agents stringList
	fs.Var(&projects, "project", "project of the --agent inbox counts (repeatable; default demo)")
	fs.Var(&agents, "agent", "also count the pending inbox entries of this agent (repeatable)")
	channel := fs.String("channel", "default", "channel of the inbox request subjects")
	quiet := fs.Duration("discovery-wait", 300*time.Millisecond, "how long to wait for more workers after the last one answered")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q (status takes flags only)", pos[0])
	}
	if *quiet <= 0 {
		return usagef("--discovery-wait must be positive, e.g. 300ms")
	}
	if len(projects) == 0 {
		projects = stringList{"demo"}
	}
	for _, p := range projects {
		if err := card.ValidateName("project_id", p); err != nil {
			return usagef("--project: %v", err)
		}
	}
	for _, a := range agents {
		if err := card.ValidateName("agent_id", a); err != nil {
			return usagef("--agent: %v", err)
		}
	}
	nc, err := mf.connect(ctx, "status")
	if err != nil {
		return err
	}
	defer nc.Close()
	rep := &statusReport{Problems: []string{}, Nodes: []nodeStatus{}, Assets: []assetStatus{},
		Workers: []workerStatus{}, Tools: []toolStatus{}, Consumers: []consumerStatus{}, Inbox: inboxStatus{Agents: []agentDepth{}}}
	if err := discoverWorkers(ctx, nc, mf.timeout, *quiet, rep); err != nil {
		return err
	}
	// What JetStream cannot tell now (no quorum, a leader being elected:
	// "JetStream system temporarily unavailable") is a readiness problem:
	// the report is still printed, NOT READY with the reason, exit 1.
	if err := assetStatuses(ctx, nc, mf.timeout, rep); err != nil {
		rep.Problems = append(rep.Problems, err.Error())
	} else if err := jetStreamStatus(ctx, nc, mf.version, rep); err != nil {
		rep.Problems = append(rep.Problems, err.Error())
	}
	rep.Ready = len(rep.Problems) == 0
	if len(agents) > 0 {
		ic, err := natsinbox.NewClient(nc, svc.WithVersion(mf.version), svc.WithChannel(*channel), svc.WithTimeout(mf.timeout))
		if err != nil {
			return usagef("%v", err)
		}
		for _, p := range projects {
			for _, a := range agents {
				es, err := listEntries(ctx, ic, p, inbox.ListQuery{AgentID: a, State: inbox.StatePending})
				if err != nil {
					return fmt.Errorf("inbox of agent %s in project %s: %w", a, p, err)
				}
				rep.Inbox.Agents = append(rep.Inbox.Agents, agentDepth{ProjectID: p, AgentID: a, Pending: len(es)})
			}
		}
	}
	if mf.json {
		err = writeJSON(c.env.stdout, rep)
	} else {
		err = writeStatus(c.env.stdout, rep)
	}
	if err == nil && !rep.Ready {
		err = fmt.Errorf("%w: %s", errNotReady, strings.Join(rep.Problems, "; "))
	}
	return err
}

// collect sends a micro discovery request and gathers the replies until no
// reply came for quiet (or timeout passed).
func collect(ctx context.Context, nc *nats.Conn, subject string, timeout, quiet time.Duration) ([][]byte, error) {
	inboxSubj := nc.NewRespInbox()
	ch := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(inboxSubj, ch)
	if err != nil {
		return nil, fmt.Errorf("discovery: subscribe: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inboxSubj, nil); err != nil {
		return nil, fmt.Errorf("discovery: request %s: %w", subject, err)
	}
	var out [][]byte
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	idle := time.NewTimer(quiet)
	defer idle.Stop()
	for {
		select {
		case m := <-ch:
			out = append(out, m.Data)
			idle.Reset(quiet)
		case <-idle.C:
			return out, nil
		case <-deadline.C:
			return out, nil
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
}

func discoverWorkers(ctx context.Context, nc *nats.Conn, timeout, quiet time.Duration, rep *statusReport) error {
	infos, err := collect(ctx, nc, "$SRV.INFO."+worker.ServiceName, timeout, quiet)
	if err != nil {
		return err
	}
	stats, err := collect(ctx, nc, "$SRV.STATS."+worker.ServiceName, timeout, quiet)
	if err != nil {
		return err
	}
	statsByID := map[string]*micro.Stats{}
	for _, raw := range stats {
		var s micro.Stats
		if json.Unmarshal(raw, &s) == nil && s.ID != "" {
			statsByID[s.ID] = &s
		}
	}
	tools := map[string]*toolStatus{}
	for _, raw := range infos {
		var in micro.Info
		if json.Unmarshal(raw, &in) != nil || in.ID == "" {
			continue
		}
		ws := workerStatus{Instance: in.Metadata[worker.MetaInstance], ServiceID: in.ID, Version: in.Version,
			ProtocolVersion: in.Metadata[worker.MetaProtocolVersion], Projects: splitList(in.Metadata[worker.MetaProjects]), Tools: []string{}}
		st := statsByID[in.ID]
		if st != nil {
			ws.Started = st.Started
		}
		for _, ep := range in.Endpoints {
			name := ep.Metadata[worker.MetaTool]
			if name == "" {
				name = ep.Name
			}
			ws.Tools = append(ws.Tools, name)
			ts := tools[name]
			if ts == nil {
				ts = &toolStatus{Tool: name}
				tools[name] = ts
			}
			ts.Workers++
			if st == nil {
				continue
			}
			for _, es := range st.Endpoints {
				if es.Name != ep.Name || len(es.Data) == 0 {
					continue
				}
				var d worker.ToolStats
				if json.Unmarshal(es.Data, &d) == nil {
					ts.Calls += d.Calls
					ts.Failed += d.Failed
					ts.InFlight += d.InFlight
					ts.Redelivered += d.Redelivered
					ts.ClaimTakeovers += d.ClaimTakeovers
				}
			}
		}
		sort.Strings(ws.Tools)
		rep.Workers = append(rep.Workers, ws)
	}
	sort.Slice(rep.Workers, func(i, j int) bool { return rep.Workers[i].Instance < rep.Workers[j].Instance })
	for _, ts := range tools {
		rep.Tools = append(rep.Tools, *ts)
	}
	sort.Slice(rep.Tools, func(i, j int) bool { return rep.Tools[i].Tool < rep.Tools[j].Tool })
	return nil
}

func splitList(s string) []string {
	out := []string{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func jetStreamStatus(ctx context.Context, nc *nats.Conn, ver string, rep *statusReport) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	name := streams.CommandStream(ver)
	st, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("the command stream %s does not exist: is the mesh running with protocol %s? (--protocol)", name, ver)
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	info := st.CachedInfo()
	rep.Stream = &streamStatus{Name: name, Messages: info.State.Msgs, Bytes: info.State.Bytes}
	lister := st.ListConsumers(ctx)
	for ci := range lister.Info() {
		filters := ci.Config.FilterSubjects
		if len(filters) == 0 && ci.Config.FilterSubject != "" {
			filters = []string{ci.Config.FilterSubject}
		}
		if filters == nil {
			filters = []string{}
		}
		rep.Consumers = append(rep.Consumers, consumerStatus{Name: ci.Name, FilterSubjects: filters, Lag: ci.NumPending,
			Pending: ci.NumAckPending, Redelivered: ci.NumRedelivered, Waiting: ci.NumWaiting})
		if ci.Name == streams.InboxConsumer {
			rep.Inbox.UnprocessedReports = ci.NumPending + uint64(ci.NumAckPending)
		}
	}
	if err := lister.Err(); err != nil {
		return fmt.Errorf("consumers of %s: %w", name, err)
	}
	sort.Slice(rep.Consumers, func(i, j int) bool { return rep.Consumers[i].Name < rep.Consumers[j].Name })
	return nil
}

func writeStatus(w io.Writer, r *statusReport) error {
	ew := &statusWriter{w: w}
	writeReadiness(ew, r)
	ew.printf("%s", plural(len(r.Workers), "worker", "workers"))
	if len(r.Workers) == 0 {
		ew.printf(" answered discovery ($SRV.INFO.%s)\n", worker.ServiceName)
	} else {
		ew.printf("\n")
		tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "INSTANCE\tVERSION\tPROJECTS\tTOOLS")
		for _, wk := range r.Workers {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", wk.Instance, wk.Version, strings.Join(wk.Projects, ","), strings.Join(wk.Tools, ","))
		}
		_ = tw.Flush()
		ew.printf("\n")
		tw = tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOOL\tWORKERS\tCALLS\tFAILED\tIN FLIGHT\tREDELIVERED\tTAKEOVERS")
		for _, t := range r.Tools {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", t.Tool, t.Workers, t.Calls, t.Failed, t.InFlight, t.Redelivered, t.ClaimTakeovers)
		}
		_ = tw.Flush()
	}
	if r.Stream != nil {
		ew.printf("\nstream %s: %d messages, %d bytes\n", r.Stream.Name, r.Stream.Messages, r.Stream.Bytes)
	}
	tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER\tLAG\tPENDING\tREDELIVERED\tWAITING\tFILTER")
	for _, c := range r.Consumers {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", c.Name, c.Lag, c.Pending, c.Redelivered, c.Waiting, strings.Join(c.FilterSubjects, ","))
	}
	_ = tw.Flush()
	ew.printf("\ninbox: %d reports not yet stored\n", r.Inbox.UnprocessedReports)
	for _, a := range r.Inbox.Agents {
		ew.printf("inbox of agent %s in project %s: %d pending entries\n", a.AgentID, a.ProjectID, a.Pending)
	}
	return ew.err
}

// statusWriter keeps the first write error.
type statusWriter struct {
	w   io.Writer
	err error
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

func (s *statusWriter) printf(format string, a ...any) { _, _ = fmt.Fprintf(s, format, a...) }

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
