package unrouted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/streams"
	"github.com/utpmesh/utpmesh/pkg/utp"
	"github.com/utpmesh/utpmesh/subjects"
)

// CodeNotFound is the UTP error code of a call whose tool does not exist.
const CodeNotFound card.ErrorCode = "not_found"

// Defaults of Config.
const (
	DefaultInterval = 10 * time.Second
	DefaultGrace    = 30 * time.Second
)

// Store is what the Sweeper needs of the CardStore.
type Store interface {
	FindToolResult(ctx context.Context, projectID, agentTurnID, toolCallID string) (*card.Card, error)
	Claim(ctx context.Context, req cardstore.ClaimRequest) (*cardstore.Claim, error)
	Put(ctx context.Context, cards ...*card.Card) error
}

// Registry is what the Sweeper needs of the tool registry.
type Registry interface {
	List(ctx context.Context, projectID string) ([]*registry.Entry, error)
}

var (
	_ Store    = cardstore.Store(nil)
	_ Registry = registry.Registry(nil)
)

// Config configures a Sweeper.
type Config struct {
	// Version is the protocol version token; default subjects.DefaultVersion.
	Version string
	// Store and Registry are the mesh's. Required.
	Store    Store
	Registry Registry
	// Interval between sweeps; default DefaultInterval.
	Interval time.Duration
	// Grace is how old a command must be before it is answered; default
	// DefaultGrace. Negative means 0 (tests). An unrouted command is
	// answered by the first sweep after it is Grace old: between Grace
	// and Grace+Interval after it was stored, plus the sweep's own time.
	Grace time.Duration
	// Report delivers the report of an answered call to the inbox;
	// default: a JetStream publish on cmd.sys.inbox.report of the call's
	// project and channel (what workers do), with msg the report message
	// (body and headers) to send there.
	Report func(ctx context.Context, msg *nats.Msg) error
	// Holder names this sweeper in the claims it takes; default
	// "unrouted-<host>-<pid>" (sweepers of several mesh nodes then never
	// share a claim).
	Holder string
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Stats counts what one sweep did.
type Stats struct {
	// Subjects is how many tool subjects with messages the stream holds.
	Subjects int `json:"subjects"`
	// Unrouted is how many of them no durable consumer and no registered
	// tool serve.
	Unrouted int `json:"unrouted"`
	// Answered commands got a failed result (or their existing one) and a
	// report; DeadLettered ones a dead-letter event.
	Answered     int `json:"answered"`
	DeadLettered int `json:"dead_lettered"`
	// Waiting commands are younger than Grace, or their call is claimed.
	Waiting int `json:"waiting"`
}

// Sweeper finds and answers unrouted tool commands.
type Sweeper struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex // one sweep at a time
	// warnOnce logs each unaddressable subject once.
	warnOnce onceSet
}

// onceSet runs a function once per key, for the first maxOnceKeys keys.
type onceSet struct {
	mu   sync.Mutex
	seen map[string]bool
}

const maxOnceKeys = 1024

// Do runs fn unless key was seen (or the set is full).
func (o *onceSet) Do(key string, fn func()) {
	o.mu.Lock()
	if o.seen == nil {
		o.seen = map[string]bool{}
	}
	if o.seen[key] || len(o.seen) >= maxOnceKeys {
		o.mu.Unlock()
		return
	}
	o.seen[key] = true
	o.mu.Unlock()
	fn()
}

// New returns a Sweeper on nc; call Start to sweep every Interval, or Sweep.
func New(nc *nats.Conn, cfg Config) (*Sweeper, error) {
	if nc == nil || cfg.Store == nil || cfg.Registry == nil {
		return nil, errors.New("unrouted: New needs a NATS connection, Config.Store and Config.Registry")
	}
	if cfg.Version == "" {
		cfg.Version = subjects.DefaultVersion
	}
	if err := subjects.ValidateToken("version", cfg.Version); err != nil {
		return nil, fmt.Errorf("unrouted: %w", err)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Grace == 0 {
		cfg.Grace = DefaultGrace
	} else if cfg.Grace < 0 {
		cfg.Grace = 0
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		cfg.Holder = fmt.Sprintf("unrouted-%s-%d", host, os.Getpid())
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("unrouted: jetstream: %w", err)
	}
	return &Sweeper{cfg: cfg, nc: nc, js: js, log: cfg.Logger}, nil
}

// Start sweeps every Interval until Stop.
func (s *Sweeper) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				st, err := s.Sweep(ctx)
				if err != nil && ctx.Err() == nil {
					s.log.Warn("unrouted: sweep failed; the next one retries", "err", err)
				} else if st.Answered+st.DeadLettered > 0 {
					s.log.Info("unrouted: answered commands no tool serves", "answered", st.Answered, "dead_lettered", st.DeadLettered)
				}
			}
		}
	}()
}

// Stop ends the sweeps started by Start and waits for the one running.
func (s *Sweeper) Stop(ctx context.Context) error {
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sweep looks at the command stream once and answers the unrouted
// commands older than Grace. An error on one subject does not stop the
// others: Sweep answers what it can and returns every error, joined.
func (s *Sweeper) Sweep(ctx context.Context) (Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st Stats
	pattern := "cg." + s.cfg.Version + ".*.*.cmd.tool.>"
	stream, err := s.js.Stream(ctx, streams.CommandStream(s.cfg.Version))
	if err != nil {
		return st, fmt.Errorf("unrouted: command stream: %w", err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(pattern))
	if err != nil {
		return st, fmt.Errorf("unrouted: stream info: %w", err)
	}
	st.Subjects = len(info.State.Subjects)
	if st.Subjects == 0 {
		return st, nil
	}
	filters, err := servingFilters(ctx, stream)
	if err != nil {
		return st, err
	}
	entries := map[string][]*registry.Entry{}
	names := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		names = append(names, subj)
	}
	sort.Strings(names)
	var errs []error
	for _, subj := range names {
		if matchesAny(filters, subj) {
			continue
		}
		sub, ok := s.toolSubject(subj)
		if !ok {
			continue
		}
		es, ok := entries[sub.Project]
		if !ok {
			es, err = s.cfg.Registry.List(ctx, sub.Project)
			if err != nil {
				errs = append(errs, fmt.Errorf("unrouted: registry of project %s: %w", sub.Project, err))
				continue
			}
			entries[sub.Project] = es
		}
		if registered(es, sub) {
			continue // the tool exists: its command waits for a worker
		}
		st.Unrouted++
		if err := s.answerSubject(ctx, stream, subj, info.State.FirstSeq, info.State.Subjects[subj], sub, es, &st); err != nil {
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return st, errors.Join(errs...)
}

// servingFilters returns the filter subjects of the command stream's
// durable consumers: the ones that serve a subject. An unfiltered durable
// consumer serves every subject (">"). Ephemeral consumers are readers,
// not servers — an ordered consumer of `nats stream view`, say — and the
// sweeper's own reads use no consumer at all (direct message gets), so
// neither makes a subject look served.
func servingFilters(ctx context.Context, stream jetstream.Stream) ([]string, error) {
	var filters []string
	lister := stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		if ci.Config.Durable == "" {
			continue
		}
		if f := ci.Config.FilterSubject; f != "" {
			filters = append(filters, f)
		}
		filters = append(filters, ci.Config.FilterSubjects...)
		if ci.Config.FilterSubject == "" && len(ci.Config.FilterSubjects) == 0 {
			filters = append(filters, ">")
		}
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("unrouted: list consumers: %w", err)
	}
	return filters, nil
}

// toolSubject parses a subject of the command stream under cmd.tool.>.
// A subject whose target tokens break the token rules is still a tool
// command nobody serves, answered like any other; one whose version,
// project or channel is not a valid token cannot address a result or a
// dead letter: it is logged (once per sweeper) and left to age out.
func (s *Sweeper) toolSubject(subj string) (subjects.Subject, bool) {
	if sub, err := subjects.Parse(subj); err == nil {
		return sub, sub.Kind() == subjects.KindToolCommand
	}
	toks := strings.Split(subj, ".")
	if len(toks) >= 7 && toks[0] == "cg" && toks[1] == s.cfg.Version && toks[4] == "cmd" && toks[5] == "tool" &&
		subjects.ValidateToken("project_id", toks[2]) == nil && subjects.ValidateToken("channel_id", toks[3]) == nil {
		for _, tok := range toks[6:] {
			if tok == "" {
				return subjects.Subject{}, false // no such NATS subject
			}
		}
		sub := subjects.Subject{Version: toks[1], Project: toks[2], Channel: toks[3], Category: subjects.Cmd, Component: subjects.Tool, Target: toks[6]}
		if len(toks) > 7 {
			sub.Suffix = toks[7:]
		}
		return sub, true
	}
	s.warnOnce.Do(subj, func() {
		s.log.Warn("unrouted: a command subject with an invalid project or channel token: no result or dead letter can be addressed; it ages out of the stream",
			"subject", strings.ToValidUTF8(subj, "\uFFFD"))
	})
	return subjects.Subject{}, false
}

// answerSubject answers every command older than Grace on one unrouted
// subject: count messages from stream sequence first on. It reads them
// with direct message gets (next message on the subject), so the sweep
// leaves no consumer behind that could pass for the subject's server.
func (s *Sweeper) answerSubject(ctx context.Context, stream jetstream.Stream, subj string, first, count uint64, sub subjects.Subject, es []*registry.Entry, st *Stats) error {
	now := time.Now()
	seq := max(first, 1)
	for n := uint64(0); n < count; n++ {
		msg, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil // taken or deleted since the stream info
		}
		if err != nil {
			return fmt.Errorf("unrouted: read %s: %w", sub, err)
		}
		seq = msg.Sequence + 1
		if now.Sub(msg.Time) < s.cfg.Grace {
			st.Waiting += int(count - n) // the stream keeps them in time order
			return nil
		}
		done, err := s.answer(ctx, msg, sub, es, st)
		if err != nil {
			return err
		}
		if !done {
			st.Waiting++
			continue
		}
		if err := stream.DeleteMsg(ctx, msg.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("unrouted: delete answered command %d on %s: %w", msg.Sequence, sub, err)
		}
	}
	return nil
}

// registered reports whether an entry of the project targets sub: its
// target subject rendered for sub's project and channel is sub. Only the
// exact subject: a worker's consumer filters on its target and nothing
// under it, so cmd.tool.echo.extra is not echo's.
func registered(es []*registry.Entry, sub subjects.Subject) bool {
	want := fullTarget(sub)
	for _, e := range es {
		if t := target(e, sub); t != "" && t == want {
			return true
		}
	}
	return false
}

// fullTarget is what follows cmd.tool. in sub.
func fullTarget(sub subjects.Subject) string {
	return strings.Join(append([]string{sub.Target}, sub.Suffix...), ".")
}

// target is the cmd.tool target of e (all tokens after cmd.tool.) for
// sub's project and channel, or "".
func target(e *registry.Entry, sub subjects.Subject) string {
	t, err := subjects.ParseTemplate(e.TargetSubject)
	if err != nil || t.Kind() != subjects.KindToolCommand || !t.Matches(sub.Project, sub.Channel) {
		return ""
	}
	r, err := t.Render(sub.Version, sub.Project, sub.Channel)
	if err != nil {
		return ""
	}
	return fullTarget(r)
}

// matchesAny reports whether one NATS filter matches subject.
func matchesAny(filters []string, subject string) bool {
	toks := strings.Split(subject, ".")
	for _, f := range filters {
		if match(strings.Split(f, "."), toks) {
			return true
		}
	}
	return false
}

func match(f, s []string) bool {
	for i, t := range f {
		if t == ">" {
			return len(s) > i
		}
		if i >= len(s) || (t != "*" && t != s[i]) {
			return false
		}
	}
	return len(f) == len(s)
}

// nearest returns up to three registered targets closest to want.
func nearest(es []*registry.Entry, sub subjects.Subject) []string {
	type cand struct {
		t string
		d int
	}
	seen := map[string]bool{}
	var cs []cand
	for _, e := range es {
		t := target(e, sub)
		if t == "" || seen[t] {
			continue
		}
		seen[t] = true
		cs = append(cs, cand{t, distance(strings.ToLower(t), strings.ToLower(fullTarget(sub)))})
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].d < cs[j].d || (cs[i].d == cs[j].d && cs[i].t < cs[j].t) })
	var out []string
	for i := 0; i < len(cs) && i < 3; i++ {
		out = append(out, cs[i].t)
	}
	return out
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// errNotRoutable marks a command that cannot address a result.
var errNotRoutable = errors.New("not routable")

// command parses msg; a command without the ids of a result is
// errNotRoutable (with the field and reason).
func command(msg *jetstream.RawStreamMsg, sub subjects.Subject) (*utp.Command, string, error) {
	cmd, err := utp.ParseCommand(msg.Data, msg.Header, sub.Project, sub.Channel, false)
	if err == nil {
		return cmd, "", nil
	}
	var ce *utp.CommandError
	if errors.As(err, &ce) && ce.Routable {
		c := ce.Partial
		if !c.AfterExecution.Valid() {
			c.AfterExecution = card.Suspend
		}
		return &c, "", nil
	}
	field := "(body)"
	if ce != nil {
		field = ce.Field
	}
	return nil, field, fmt.Errorf("%w: %v", errNotRoutable, err)
}

// resultContent is the failed result of a call on an unrouted subject.
func resultContent(cmd *utp.Command, sub subjects.Subject, near []string) card.ToolResultContent {
	msg := fmt.Sprintf("no tool serves %s: project %s has no registered tool with target %q and no worker consumes that subject", sub, sub.Project, fullTarget(sub))
	if len(near) > 0 {
		msg += "; nearest registered targets: " + strings.Join(near, ", ")
	}
	msg += " (utpmesh tools ls lists the project's tools; register a tool with utpmesh tools import and start its worker)"
	msg = strings.ToValidUTF8(msg, "\uFFFD") // a subject's tokens may be any bytes; a card's text is UTF-8
	detail, _ := json.Marshal(map[string]any{"subject": sub.String(), "target": fullTarget(sub), "nearest_targets": nonNil(near)})
	return card.NewResultContent(card.StatusFailed, cmd.AfterExecution, CodeNotFound, msg, detail)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
