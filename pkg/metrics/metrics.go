package metrics

import (
	"regexp"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/utpmesh/utpmesh/cardstore/boltstore"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/inbox/inboxsvc"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// MaxCodes bounds the distinct error-code label values: codes beyond it
// (tool services may define their own) are counted as "other".
const MaxCodes = 32

// Label values used when the real value would be unbounded.
const (
	UnknownTool = "_unknown"
	OtherCode   = "other"
)

// Bucket layouts, in seconds (durations) and requests (group size).
var (
	// CallBuckets: 1 ms … ~150 s, ×2.5.
	CallBuckets = prometheus.ExponentialBuckets(0.001, 2.5, 14)
	// CommitBuckets: 100 µs … ~3.3 s, ×2.
	CommitBuckets = prometheus.ExponentialBuckets(0.0001, 2, 16)
	// GroupBuckets: 1 … 256 requests, ×2 (256 is the group-commit cap).
	GroupBuckets = prometheus.ExponentialBuckets(1, 2, 9)
)

// Metrics holds a process's collectors in its own registry.
type Metrics struct {
	reg *prometheus.Registry

	calls, redeliveries, takeovers, deadLetters, poisoned *prometheus.CounterVec
	callDur, execDur                                      *prometheus.HistogramVec
	inFlight                                              *prometheus.GaugeVec

	reports  *prometheus.CounterVec
	wakeups  prometheus.Counter
	lag      prometheus.Histogram
	pendingM sync.Mutex
	pending  func() (int, error)
	ready    func() error

	commitDur, groupSize prometheus.Histogram

	codesMu sync.Mutex
	codes   map[card.ErrorCode]string
}

// New returns Metrics with every utpmesh collector, the Go and process
// collectors and utpmesh_build_info{version} registered in a new registry.
func New(version string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), codes: map[card.ErrorCode]string{}}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m.calls = counter("utpmesh_worker_calls_total", "Tool results written by this process, by tool, status and error code (empty for success and partial).", "tool", "status", "code")
	m.redeliveries = counter("utpmesh_worker_redeliveries_total", "Tool command deliveries after the first.", "tool")
	m.takeovers = counter("utpmesh_worker_claim_takeovers_total", "Calls taken over from a worker that stopped renewing its claim.", "tool")
	m.deadLetters = counter("utpmesh_worker_dead_letters_total", "Tool commands dead-lettered (no routable result).", "tool")
	m.poisoned = counter("utpmesh_worker_poisoned_total", "Calls failed without running at the poison limit.", "tool")
	m.callDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "utpmesh_worker_call_duration_seconds",
		Help: "Time from a command's delivery to its tool.result card being written.", Buckets: CallBuckets}, []string{"tool", "status"})
	m.execDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "utpmesh_worker_execute_duration_seconds",
		Help: "Time the tool handler ran.", Buckets: CallBuckets}, []string{"tool"})
	m.inFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "utpmesh_worker_in_flight", Help: "Tool handlers running now."}, []string{"tool"})
	m.reports = counter("utpmesh_inbox_reports_total", "Report deliveries handled by the inbox, by outcome (accepted, duplicate, stale, refused, retried).", "outcome")
	m.wakeups = prometheus.NewCounter(prometheus.CounterOpts{Name: "utpmesh_inbox_wakeups_total", Help: "Agent wakeups published."})
	m.lag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "utpmesh_inbox_wakeup_lag_seconds",
		Help: "Time from a tool.result card's created_at to its wakeup being published.", Buckets: CallBuckets})
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "utpmesh_inbox_pending_entries",
		Help: "Inbox entries not yet acknowledged by their agent (read at scrape time; -1 if unreadable)."}, m.readPending)
	readyG := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "utpmesh_ready",
		Help: "1 when the node can take calls (what /readyz answers 200 for), 0 when not (read at scrape time)."}, m.readReady)
	m.commitDur = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "utpmesh_cardstore_commit_duration_seconds",
		Help: "CardStore bbolt write transaction latency, fsync included.", Buckets: CommitBuckets})
	m.groupSize = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "utpmesh_cardstore_commit_group_size",
		Help: "Write requests per CardStore transaction (group commit).", Buckets: GroupBuckets})
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "utpmesh_build_info", Help: "1, labeled with the utpmesh version."}, []string{"version"})
	build.WithLabelValues(version).Set(1)
	m.reg.MustRegister(m.calls, m.redeliveries, m.takeovers, m.deadLetters, m.poisoned, m.callDur, m.execDur, m.inFlight,
		m.reports, m.wakeups, m.lag, pending, readyG, m.commitDur, m.groupSize, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the process's registry (for extra collectors or Gather).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Worker returns the worker.Observer that feeds the utpmesh_worker_*
// metrics.
func (m *Metrics) Worker() worker.Observer { return (*workerObs)(m) }

// Inbox returns the inboxsvc.Observer that feeds the utpmesh_inbox_* metrics.
func (m *Metrics) Inbox() inboxsvc.Observer { return (*inboxObs)(m) }

// CardStore returns the boltstore.CommitObserver that feeds the
// utpmesh_cardstore_* metrics.
func (m *Metrics) CardStore() boltstore.CommitObserver { return (*storeObs)(m) }

// WatchPending makes utpmesh_inbox_pending_entries report f() at scrape
// time (typically (*inboxsvc.Service).Pending). Until it is called the gauge
// reads 0.
func (m *Metrics) WatchPending(f func() (int, error)) {
	m.pendingM.Lock()
	m.pending = f
	m.pendingM.Unlock()
}

func (m *Metrics) readPending() float64 {
	m.pendingM.Lock()
	f := m.pending
	m.pendingM.Unlock()
	if f == nil {
		return 0
	}
	n, err := f()
	if err != nil {
		return -1
	}
	return float64(n)
}

// WatchReady makes utpmesh_ready report 1 when f() returns nil, else 0,
// at scrape time. Until it is called the gauge reads 1. Serve calls it
// with ServerConfig.Ready.
func (m *Metrics) WatchReady(f func() error) {
	m.pendingM.Lock()
	m.ready = f
	m.pendingM.Unlock()
}

func (m *Metrics) readReady() float64 {
	m.pendingM.Lock()
	f := m.ready
	m.pendingM.Unlock()
	if f != nil && f() != nil {
		return 0
	}
	return 1
}

var codeSyntax = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)

// codeLabel bounds the code label: the first MaxCodes distinct well-formed
// codes are kept, anything else is "other".
func (m *Metrics) codeLabel(c card.ErrorCode) string {
	if c == "" {
		return ""
	}
	m.codesMu.Lock()
	defer m.codesMu.Unlock()
	if l, ok := m.codes[c]; ok {
		return l
	}
	l := OtherCode
	if len(m.codes) < MaxCodes && codeSyntax.MatchString(string(c)) {
		l = string(c)
	}
	if len(m.codes) < 4*MaxCodes { // remember a bounded number of answers
		m.codes[c] = l
	}
	return l
}

func toolLabel(t string) string {
	if t == "" {
		return UnknownTool
	}
	return t
}

type workerObs Metrics

var _ worker.Observer = (*workerObs)(nil)

func (o *workerObs) ExecuteStarted(tool string) { o.inFlight.WithLabelValues(toolLabel(tool)).Inc() }

func (o *workerObs) ExecuteFinished(tool string, d time.Duration) {
	o.inFlight.WithLabelValues(toolLabel(tool)).Dec()
	o.execDur.WithLabelValues(toolLabel(tool)).Observe(d.Seconds())
}

func (o *workerObs) Completed(tool string, status card.Status, code card.ErrorCode, d time.Duration) {
	t := toolLabel(tool)
	o.calls.WithLabelValues(t, string(status), (*Metrics)(o).codeLabel(code)).Inc()
	o.callDur.WithLabelValues(t, string(status)).Observe(d.Seconds())
}

func (o *workerObs) Redelivered(tool string)    { o.redeliveries.WithLabelValues(toolLabel(tool)).Inc() }
func (o *workerObs) ClaimTakenOver(tool string) { o.takeovers.WithLabelValues(toolLabel(tool)).Inc() }
func (o *workerObs) DeadLettered(tool string)   { o.deadLetters.WithLabelValues(toolLabel(tool)).Inc() }
func (o *workerObs) Poisoned(tool string)       { o.poisoned.WithLabelValues(toolLabel(tool)).Inc() }

type inboxObs Metrics

var _ inboxsvc.Observer = (*inboxObs)(nil)

func (o *inboxObs) ReportHandled(outcome string) { o.reports.WithLabelValues(outcome).Inc() }

func (o *inboxObs) WakeupSent(lag time.Duration) {
	o.wakeups.Inc()
	if lag < 0 {
		lag = 0 // clock skew between the worker and the inbox
	}
	o.lag.Observe(lag.Seconds())
}

type storeObs Metrics

var _ boltstore.CommitObserver = (*storeObs)(nil)

func (o *storeObs) Committed(requests int, d time.Duration) {
	o.commitDur.Observe(d.Seconds())
	o.groupSize.Observe(float64(requests))
}
