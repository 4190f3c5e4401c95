// Package streams creates and names the JetStream streams and consumers of
// the mesh. Everything is created idempotently at start: a second process
// starting with the same settings changes nothing.
//
// Streams:
//
//	cg_cmd_<ver>   subjects cg.<ver>.*.*.cmd.tool.>, cg.<ver>.*.*.cmd.sys.>  file storage, kept 24 h
//	cg_wake_<ver>  subjects cg.<ver>.*.*.cmd.agent.>                        file storage, kept 24 h
//	cg_evt_<ver>   subjects cg.<ver>.*.*.evt.>                              file storage, kept 7 d
//
// CommonGround keeps every command in one stream; the mesh gives agent
// commands (wakeups) a stream of their own because a stream with
// SyncAlways fsyncs its messages one after another: with wakeups beside
// the tool commands every call paid two writes on one chain, now it pays
// one on each of two chains that run in parallel (docs/performance.md).
// Publishers see no difference: the subjects are the same. Ensure moves
// the wakeup subjects out of a command stream made by an older version
// (messages already stored there stay there and age out).
//
// All use limits retention, not work-queue retention, because several
// consumers with different filters read the command stream (one per tool,
// the PMO built-ins, the inbox) and agents may replay wakeups. Acknowledged
// commands are therefore kept until they age out; the consumers' ack floors,
// not deletion, say what is done. A 2-minute duplicate window drops
// re-publishes that carry the same Nats-Msg-Id.
//
// Consumers are durable and pull-based; every process that serves the same
// tool binds to the same durable, so JetStream hands each command to one of
// them (competitive consumption) and a stopped process loses nothing: its
// unacknowledged messages are redelivered after AckWait.
package streams

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/subjects"
)

// Retention of the two streams.
const (
	CommandMaxAge   = 24 * time.Hour
	EventMaxAge     = 7 * 24 * time.Hour
	DuplicateWindow = 2 * time.Minute
)

// CommandStream and EventStream return the stream names for a version.
func CommandStream(ver string) string { return "cg_cmd_" + ver }

// WakeupStream returns the name of the stream of agent commands (wakeups).
func WakeupStream(ver string) string { return "cg_wake_" + ver }

// EventStream returns the event stream name for a version.
func EventStream(ver string) string { return "cg_evt_" + ver }

// Ensure creates or updates the command, wakeup and event streams of ver.
// The command stream is updated first, so that a command stream of an
// older version (which captured cmd.> including wakeups) gives the wakeup
// subjects up before the wakeup stream claims them.
//
// Replicas: a stream is created with WithReplicas' count (default 1), and an
// existing stream keeps its count unless WithReplicas is given — so a
// worker started without the option never shrinks a cluster's R3 streams.
func Ensure(ctx context.Context, js jetstream.JetStream, ver string, opts ...Option) error {
	return patiently(ctx, func(ctx context.Context) error { return ensure(ctx, js, ver, opts...) })
}

// ErrMissing matches (errors.Is) Check's error: a stream of the mesh does
// not exist.
var ErrMissing = errors.New("streams: stream missing")

// Check makes sure the mesh's streams exist, with STREAM.INFO only: a
// worker identity may not create or update streams (the core does, at
// `utpmesh up`). A missing one is ErrMissing with "start utpmesh up first".
func Check(ctx context.Context, js jetstream.JetStream, ver string) error {
	for _, name := range []string{CommandStream(ver), WakeupStream(ver), EventStream(ver)} {
		err := patiently(ctx, func(ctx context.Context) error { _, err := js.Stream(ctx, name); return err })
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("%w: %s does not exist: start utpmesh up first (only the mesh core creates its streams)", ErrMissing, name)
		}
		if err != nil {
			return fmt.Errorf("streams: %s: %w", name, err)
		}
	}
	return nil
}

// Patience bounds how long Ensure and EnsureConsumer send a request
// again that timed out: while a cluster elects leaders (nodes starting,
// a node restarting and catching up) or on a loaded machine, a stream or
// consumer request can go unanswered and succeed when sent again.
const Patience = 2 * time.Minute

// patiently runs step (deadline.Patiently) until Patience has passed or
// ctx ends: an attempt that timed out is sent again, with a longer bound,
// and so is one JetStream answered is temporarily unavailable (err_code
// 10008: a cluster still electing the leaders the request needs), after
// a second. Any other error is returned at once.
func patiently(ctx context.Context, step func(context.Context) error) error {
	return deadline.Patiently(ctx, Patience, temporarilyUnavailable, step)
}

// jsClusterNotAvail is JetStream's err_code for "JetStream system
// temporarily unavailable".
const jsClusterNotAvail = 10008

// temporarilyUnavailable reports whether err is JetStream's answer that it
// cannot serve the request yet (no leader for it at the moment).
func temporarilyUnavailable(err error) bool { return deadline.Unavailable(err) }

func ensure(ctx context.Context, js jetstream.JetStream, ver string, opts ...Option) error {
	var o options
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return err
		}
	}
	cmdSubj, err := subjects.StreamCommands(ver)
	if err != nil {
		return err
	}
	wakeSubj, err := subjects.AgentCommands(ver)
	if err != nil {
		return err
	}
	evtSubj, err := subjects.AllEvents(ver)
	if err != nil {
		return err
	}
	for _, cfg := range []jetstream.StreamConfig{
		{Name: CommandStream(ver), Subjects: cmdSubj, Storage: jetstream.FileStorage,
			Retention: jetstream.LimitsPolicy, MaxAge: CommandMaxAge, Duplicates: DuplicateWindow,
			Description: "UTP commands: tool calls, PMO built-ins, inbox reports"},
		{Name: WakeupStream(ver), Subjects: []string{wakeSubj}, Storage: jetstream.FileStorage,
			Retention: jetstream.LimitsPolicy, MaxAge: CommandMaxAge, Duplicates: DuplicateWindow,
			Description: "UTP agent commands: wakeups"},
		{Name: EventStream(ver), Subjects: []string{evtSubj}, Storage: jetstream.FileStorage,
			Retention: jetstream.LimitsPolicy, MaxAge: EventMaxAge, Duplicates: DuplicateWindow,
			Description: "UTP events: dead letters, notifications, audit"},
	} {
		cfg.Replicas = o.replicas
		if o.async && cfg.Name != EventStream(ver) {
			cfg.PersistMode = jetstream.AsyncPersistMode
		}
		st, err := js.Stream(ctx, cfg.Name)
		switch {
		case err == nil:
			have := st.CachedInfo().Config
			if cfg.Replicas == 0 {
				cfg.Replicas = have.Replicas
			}
			if have.PersistMode != cfg.PersistMode {
				// JetStream cannot change a stream's persist mode: the
				// stream keeps the one it was made with.
				if o.async {
					o.log("streams: the stream was made before async persistence and keeps fsyncing every message; it stays correct, only slower (a new data directory gets async streams)",
						"stream", cfg.Name, "persist_mode", have.PersistMode.String())
				}
				cfg.PersistMode = have.PersistMode
			}
		case errors.Is(err, jetstream.ErrStreamNotFound):
			if cfg.Replicas == 0 {
				cfg.Replicas = 1
			}
		default:
			return fmt.Errorf("streams: %s: %w", cfg.Name, err)
		}
		if cfg.PersistMode == jetstream.AsyncPersistMode && cfg.Replicas > 1 {
			return fmt.Errorf("%w: streams: WithAsyncPersist: %s has %d replicas; async persistence is for a single server (replicated streams are made durable by their replicas)", ErrInvalid, cfg.Name, cfg.Replicas)
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			if cfg.Replicas > 1 && strings.Contains(err.Error(), "insufficient resources") {
				return fmt.Errorf("streams: create %s with %d replicas: %w (a cluster smaller than %d JetStream servers cannot hold them)", cfg.Name, cfg.Replicas, err, cfg.Replicas)
			}
			return fmt.Errorf("streams: create %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// Option configures Ensure.
type Option func(*options) error

type options struct {
	replicas int
	async    bool
	logger   func(msg string, args ...any)
}

func (o *options) log(msg string, args ...any) {
	if o.logger != nil {
		o.logger(msg, args...)
	}
}

// ErrInvalid matches (errors.Is) an Option or combination of options
// Ensure refuses.
var ErrInvalid = errors.New("streams: invalid option")

// WithAsyncPersist makes the command and wakeup streams, when Ensure
// creates them, streams of JetStream's async persist mode: a message is
// acknowledged once it is in the server's memory, written to the file
// within milliseconds and fsync'd on the server's sync interval, instead
// of being fsync'd before its acknowledgement (the event stream, which
// holds dead letters, keeps the server's setting). A crash of the server
// can lose the last acknowledged messages of these two streams, so the
// option is only for a mesh whose messages of both are restored from
// somewhere else after a crash: a single node's CardStore keeps every
// admitted command in its outbox and every wakeup's inbox entry
// (docs/architecture.md, "Durability"). JetStream cannot change a stream's
// persist mode: streams that exist keep theirs (logged with logf). Only
// for streams of one replica.
func WithAsyncPersist(logf func(msg string, args ...any)) Option {
	return func(o *options) error {
		o.async, o.logger = true, logf
		return nil
	}
}

// WithReplicas sets the streams' replica count: 1 on a single server, 3
// in a 3-node cluster (a message is acknowledged once a majority stored
// it, so the loss of one node loses nothing). Existing streams are scaled
// to it.
func WithReplicas(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("streams: WithReplicas(%d): use 1 (single server) or 3 (cluster), at most 5", n)
		}
		o.replicas = n
		return nil
	}
}

// ToolConsumer returns the durable consumer name of a tool. Consumer names
// may not contain '.', so a tool name with dots is rewritten and given a
// short hash to keep names distinct.
func ToolConsumer(toolName string) string {
	return "utp_tool_" + safeName(toolName)
}

// WakeupAckWait is the ack wait of the durable wakeup consumers the mesh
// core makes for agent identities (AgentWakeupConsumer): how long a
// wakeup handed to an agent may stay unacknowledged before it is
// delivered again.
const WakeupAckWait = 30 * time.Second

// AgentWakeupConsumer returns the name of the durable wakeup consumer (on
// WakeupStream) of an agent identity, the one place the name is made: for
// one agent, "agent_<agent_id>_<8 hex digits>", filtered on the agent's
// wakeups in every channel of the project
// (cg.<ver>.<project>.*.cmd.agent.<agent_id>.wakeup); for agentID "", the
// project's, "project_<project>_<8 hex digits>", filtered on every
// agent's wakeups of the project (cg.<ver>.<project>.*.cmd.agent.*.wakeup).
// The digits hash the length-prefixed (project, agent id), so no two
// projects or agents share a name. The mesh core makes these durables as
// pull consumers (internal/meshauth AgentDurables); pkg/agent's Wakeups
// binds to them.
func AgentWakeupConsumer(project, agentID string) string {
	h := sha256.New()
	for _, s := range []string{project, agentID} {
		_, _ = fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	sum := hex.EncodeToString(h.Sum(nil)[:4])
	if agentID == "" {
		return "project_" + safeName(project) + "_" + sum
	}
	return "agent_" + safeName(agentID) + "_" + sum
}

// PMOConsumer is the durable consumer of the PMO built-ins.
const PMOConsumer = "utp_pmo"

// InboxConsumer is the durable consumer of the inbox service.
const InboxConsumer = "utp_inbox"

func safeName(s string) string {
	if !strings.ContainsAny(s, ".*> /\\") {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	r := strings.NewReplacer(".", "_", "*", "_", ">", "_", " ", "_", "/", "_", "\\", "_")
	return r.Replace(s) + "_" + hex.EncodeToString(sum[:4])
}

// ConsumerConfig returns the durable pull consumer settings shared by every
// command consumer: explicit acks, AckWait (extended by in-progress acks
// while a tool runs), and maxDeliver (-1: unlimited). The worker runtime
// uses -1 and enforces its own poison limit, so JetStream never stops
// delivering a command that has no result yet.
//
// One filter is set as FilterSubject, so the create request carries it in
// its subject ($JS.API.CONSUMER.CREATE.<stream>.<durable>.<filter>) and a
// NATS permission can pin a worker identity to its own filter
// (internal/meshauth).
func ConsumerConfig(name string, filters []string, ackWait time.Duration, maxDeliver int) jetstream.ConsumerConfig {
	var one string
	if len(filters) == 1 {
		one, filters = filters[0], nil
	}
	return jetstream.ConsumerConfig{
		Durable:        name,
		FilterSubject:  one,
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        ackWait,
		MaxDeliver:     maxDeliver,
		MaxAckPending:  4096,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
}

// EnsureConsumer creates or updates a durable consumer on the command
// stream. A request that times out is sent again (see patiently). A
// durable that exists with narrower filters than cfg's (each of its
// filters within one of cfg's: the one the mesh core made for a worker
// identity limited to projects) is bound as it is, with a consumer info
// request only: such a worker may not create or change it.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, ver string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	var c jetstream.Consumer
	err := patiently(ctx, func(ctx context.Context) (err error) {
		if cur, err := js.Consumer(ctx, CommandStream(ver), cfg.Durable); err == nil && Narrower(filtersOf(cur.CachedInfo().Config), filtersOf(cfg)) {
			c = cur
			return nil
		} else if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return err
		}
		c, err = js.CreateOrUpdateConsumer(ctx, CommandStream(ver), cfg)
		return err
	})
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("streams: stream %s does not exist (start the mesh with utpmesh up, or call streams.Ensure): %w", CommandStream(ver), err)
		}
		return nil, fmt.Errorf("streams: consumer %s: %w", cfg.Durable, err)
	}
	return c, nil
}

// filtersOf returns a consumer's filter subjects.
func filtersOf(cfg jetstream.ConsumerConfig) []string {
	if cfg.FilterSubject != "" {
		return []string{cfg.FilterSubject}
	}
	return cfg.FilterSubjects
}

// Narrower reports whether every subject of have lies within one of want
// and the two differ: have selects a strict subset of what want does.
func Narrower(have, want []string) bool {
	if len(have) == 0 || slices.Equal(have, want) {
		return false
	}
	for _, h := range have {
		if !slices.ContainsFunc(want, func(w string) bool { return within(h, w) }) {
			return false
		}
	}
	return true
}

// within reports whether every subject that filter f matches is matched
// by pattern p.
func within(f, p string) bool {
	ft, pt := strings.Split(f, "."), strings.Split(p, ".")
	for i, t := range pt {
		if t == ">" {
			return len(ft) > i
		}
		if i >= len(ft) || ft[i] == ">" || (t != "*" && t != ft[i]) {
			return false
		}
	}
	return len(ft) == len(pt)
}
