package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/utpmesh/utpmesh/internal/deadline"
	"github.com/utpmesh/utpmesh/internal/jskv"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
	"github.com/utpmesh/utpmesh/services/cynode/store"
	"github.com/utpmesh/utpmesh/subjects"
)

// Locality's names.
const (
	// Bucket is the KV bucket of the sandbox records: which node holds
	// each job's sandbox. The mesh core creates it (Provision).
	Bucket = "cynode_sandboxes"
	// NodeFile, under the data directory, holds the node's name. When it
	// is missing a name is generated (the host name and 6 hex digits)
	// and written there; write one of your own before the start to choose.
	NodeFile = "cynode-node"
	// MicroService is the NATS micro service every cynode node registers:
	// its endpoint serves the node's subject, its STATS data is NodeStats.
	MicroService = "utpmesh-cynode-node"
	// SubjectService is the svc token of the node subjects.
	SubjectService = "cynode"
	// maxNodeName bounds a node name.
	maxNodeName = 64
)

// ProbeTimeout bounds the probe of a holder before a call is forwarded
// to it: a holder that does not answer it is gone.
var ProbeTimeout = 2 * time.Second

// Errors of the sandbox service.
var (
	// ErrNoBwrap is returned when bubblewrap is not installed.
	ErrNoBwrap = errors.New("bubblewrap (bwrap) is not installed: apt-get install -y bubblewrap (make test-deps)")
	// ErrNodeName: the node's name is not one (NodeFile holds something
	// else); the message names the file and the rule.
	ErrNodeName = errors.New("cynode sandbox: bad node name")
	// ErrNodeTaken: another live worker serves the node's name.
	ErrNodeTaken = errors.New("cynode sandbox: node name taken")
	// ErrNoBucket: the records bucket does not exist and this worker may
	// not create it.
	ErrNoBucket = errors.New("cynode sandbox: no sandbox records bucket")
)

// Locality is what makes a Service one node of the mesh.
type Locality struct {
	// Conn provides the mesh's NATS connection; it may block until the
	// mesh exists.
	Conn func(ctx context.Context) (*nats.Conn, error)
	// Store is the cynode store the calls forwarded to this node use.
	Store store.Store
	// Node overrides the name in NodeFile ("": that file's, generated
	// when missing).
	Node string
	// Version is the protocol version of the node subject (default
	// subjects.DefaultVersion).
	Version string
	// Logger logs what locality does in the background.
	Logger *slog.Logger
}

// record is a sandbox's entry in Bucket.
type record struct {
	Node        string    `json:"node"`
	Incarnation string    `json:"incarnation"`
	ProjectID   string    `json:"project_id"`
	TaskID      string    `json:"task_id"`
	JobID       string    `json:"job_id"`
	ImageRef    string    `json:"image_ref,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	CreatedBy   string    `json:"created_by,omitempty"`
}

// locality is a Service's node: its name, incarnation, records bucket and
// micro service.
type locality struct {
	s       *Service
	cfg     Locality
	node    string
	inc     string
	started time.Time
	ready   chan struct{}
	// err, nc, bucket and svc are set before ready closes.
	err     error
	nc      *nats.Conn
	bucket  *jskv.Bucket
	svc     micro.Service
	running atomic.Int64
	// stopMu guards svc (set by register) and stopped (set by stop).
	stopMu  sync.Mutex
	stopped bool
}

// BucketConfig is the records bucket's configuration with replicas.
func BucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: Bucket, History: 1, Replicas: max(replicas, 1), Storage: jetstream.FileStorage,
		Description: "CyNodeAI sandbox records: the node that holds each job's sandbox (utpmesh services/cynode/sandbox)"}
}

// Provision creates or updates the records bucket with the mesh core's
// connection and the mesh's replica count (`utpmesh up`): cynode worker
// identities may use the bucket, not create it.
func Provision(ctx context.Context, nc *nats.Conn, replicas int) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("cynode sandbox: %w", err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, BucketConfig(replicas)); err != nil {
		return fmt.Errorf("cynode sandbox: KV bucket %s: %w", Bucket, err)
	}
	return nil
}

// PublishSubjects are the subjects a cynode worker publishes to for
// locality: the records bucket (bind, leader reads, compare-and-set
// writes; no stream create or update), every node's subject (forwarding)
// and the nodes' discovery ($SRV.INFO and $SRV.STATS of MicroService).
func PublishSubjects(ver string) []string {
	st := "KV_" + Bucket
	p, _ := subjects.NodeServicePattern(ver, SubjectService, "*")
	return []string{
		"$JS.API.STREAM.INFO." + st,
		"$JS.API.DIRECT.GET." + st + ".>", "$JS.API.STREAM.MSG.GET." + st,
		"$KV." + Bucket + ".>",
		p,
		"$SRV.INFO." + MicroService, "$SRV.STATS." + MicroService,
	}
}

// SubscribeSubjects are the subjects a cynode worker serves for locality:
// the node subjects (one worker identity serves every node, so it is all
// of them).
func SubscribeSubjects(ver string) []string {
	p, _ := subjects.NodeServicePattern(ver, SubjectService, "*")
	return []string{p}
}

// Node is the service's node name ("" before Serve).
func (s *Service) Node() string {
	if l := s.localityOf(); l != nil {
		return l.node
	}
	return ""
}

func (s *Service) localityOf() *locality {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loc
}

// Serve makes the service a node of the mesh, so that its sandboxes are
// reached from every cynode worker: it reads (or generates) the node's
// name, then, once l.Conn has the mesh's connection, binds the records
// bucket (creating it when missing and the connection may) and registers
// the node's micro service. It returns when the node serves, or with the
// reason it cannot; the sandbox tools wait for it and answer unavailable
// with that reason. Without Serve every sandbox is local to the process
// (one worker).
func (s *Service) Serve(ctx context.Context, l Locality) error {
	loc, err := s.enable(l)
	if err != nil {
		return err
	}
	return loc.start(ctx)
}

// ServeLater is Serve for a mesh that starts later: the name is read now,
// the rest runs in the background (its failure is logged and answered by
// the sandbox tools).
func (s *Service) ServeLater(ctx context.Context, l Locality) error {
	loc, err := s.enable(l)
	if err != nil {
		return err
	}
	go func() {
		if err := loc.start(ctx); err != nil && ctx.Err() == nil {
			loc.log().Error("cynode sandbox: this node does not serve its sandboxes to other workers", "node", loc.node, "err", err)
		}
	}()
	return nil
}

func (s *Service) enable(l Locality) (*locality, error) {
	if l.Conn == nil || l.Store == nil {
		return nil, errors.New("cynode sandbox: locality needs the mesh's connection and the cynode store")
	}
	if l.Version == "" {
		l.Version = subjects.DefaultVersion
	}
	node := l.Node
	if node == "" {
		var err error
		if node, err = loadNode(s.dataDir); err != nil {
			return nil, err
		}
	} else if err := checkNode(node); err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrNodeName, node, err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	loc := &locality{s: s, cfg: l, node: node, inc: hex.EncodeToString(b[:]), started: time.Now().UTC(), ready: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loc != nil {
		return nil, errors.New("cynode sandbox: Serve called twice")
	}
	s.loc = loc
	return loc, nil
}

func (l *locality) log() *slog.Logger {
	if l.cfg.Logger != nil {
		return l.cfg.Logger
	}
	return slog.Default()
}

// start connects, binds the bucket and registers the micro service.
func (l *locality) start(ctx context.Context) (err error) {
	defer func() {
		l.err = err
		close(l.ready)
	}()
	nc, err := l.cfg.Conn(ctx)
	if err != nil {
		return fmt.Errorf("cynode sandbox: the mesh's connection: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("cynode sandbox: %w", err)
	}
	bctx, cancel := deadline.Within(ctx, 0)
	defer cancel()
	kv, err := js.KeyValue(bctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		// A mesh without identities (tests, an old core) made none.
		kv, err = js.CreateOrUpdateKeyValue(bctx, BucketConfig(1))
		if err != nil {
			return fmt.Errorf("%w: %s does not exist and this worker may not create it (%v); the mesh core creates it when it starts (utpmesh up)", ErrNoBucket, Bucket, err)
		}
	}
	if err != nil {
		return fmt.Errorf("cynode sandbox: KV bucket %s: %w", Bucket, err)
	}
	if l.bucket, err = jskv.Bind(js, kv, 0); err != nil {
		return err
	}
	l.nc = nc
	if p, perr := l.probe(ctx, pingProject, pingProject, l.node); perr == nil {
		return fmt.Errorf("%w: node %s is served by another live cynode worker (incarnation %s, started %s); give this worker a name of its own in %s (or --data of its own)",
			ErrNodeTaken, l.node, p.Incarnation, p.Started.Format(time.RFC3339), filepath.Join(l.s.dataDir, NodeFile))
	}
	return l.register()
}

// wait waits until the node serves; its error says why it cannot.
func (l *locality) wait(ctx context.Context) error {
	select {
	case <-l.ready:
		if l.err != nil {
			return gateway.Errorf(gateway.TypeUnavailable, "this worker's node %s does not serve sandboxes: %v", l.node, l.err)
		}
		return nil
	case <-ctx.Done():
		return gateway.Errorf(gateway.TypeUnavailable, "this worker's node %s is not connected to the mesh yet: %v", l.node, ctx.Err())
	}
}

// stop deregisters the node: calls forwarded to it find no responder.
func (l *locality) stop() {
	l.stopMu.Lock()
	defer l.stopMu.Unlock()
	l.stopped = true
	if l.svc != nil {
		_ = l.svc.Stop()
		l.svc = nil
		// Calls forwarded from now on find no responder at once.
		fctx, cancel := deadline.Within(context.Background(), 0)
		defer cancel()
		_ = l.nc.FlushWithContext(fctx)
	}
}

// loadNode reads the node's name from <dataDir>/NodeFile, writing a
// generated one there first when the file is missing.
func loadNode(dataDir string) (string, error) {
	path := filepath.Join(dataDir, NodeFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		name := generateNode()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(name+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("cynode sandbox: write the node name: %w", err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return "", fmt.Errorf("cynode sandbox: write the node name: %w", err)
		}
		return name, nil
	}
	if err != nil {
		return "", fmt.Errorf("cynode sandbox: read the node name: %w", err)
	}
	name := strings.TrimSpace(string(raw))
	if err := checkNode(name); err != nil {
		return "", fmt.Errorf("%w: %s holds %q: %v; write such a name there, or remove the file and one is generated", ErrNodeName, path, name, err)
	}
	return name, nil
}

// checkNode: 1 to 64 letters, digits, _ or -.
func checkNode(name string) error {
	if name == "" || len(name) > maxNodeName {
		return fmt.Errorf("a node name is 1 to %d characters", maxNodeName)
	}
	for _, c := range name {
		if !nodeChar(c) {
			return fmt.Errorf("%q is not allowed: a node name holds letters, digits, _ and - only", c)
		}
	}
	return nil
}

func nodeChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// generateNode is the short host name (other characters as -) and 6 hex
// digits.
func generateNode() string {
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	host = strings.Map(func(c rune) rune {
		if nodeChar(c) {
			return c
		}
		return '-'
	}, host)
	if len(host) > 40 {
		host = host[:40]
	}
	if host == "" {
		host = "node"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// key is a sandbox's key in Bucket (the hash its directory is named by).
func key(taskID, jobID string) string {
	sum := sha256.Sum256([]byte(taskID + "\x00" + jobID))
	return hex.EncodeToString(sum[:16])
}

// lookup reads the job's record from the bucket's leader.
func (l *locality) lookup(ctx context.Context, x *gateway.Exec) (record, jskv.Entry, error) {
	e, err := l.bucket.Latest(ctx, key(x.TaskID, x.JobID))
	if err != nil {
		return record{}, e, gateway.Errorf(gateway.TypeUnavailable, "reading the sandbox records (%s): %v; call again", Bucket, err)
	}
	var r record
	if e.Exists {
		if err := json.Unmarshal(e.Value, &r); err != nil {
			return record{}, e, gateway.Errorf(gateway.TypeInternal, "the sandbox record of job %s: %v", x.JobID, err)
		}
	}
	return r, e, nil
}

func (l *locality) mine(r record) bool { return r.Node == l.node && r.Incarnation == l.inc }

// noSandbox is the answer for a job without a record.
func noSandbox(x *gateway.Exec) error {
	return gateway.Errorf(gateway.TypeNotFound, "job %s has no sandbox; create it with sandbox.create", x.JobID)
}

// gone is the answer for a sandbox whose node is gone.
func gone(x *gateway.Exec, r record, why string) *gateway.Error {
	return gateway.Errorf(gateway.TypeUnavailable, "the sandbox of job %s lived on node %s, which is gone (%s); its work dir went with it: create a new sandbox with sandbox.create", x.JobID, r.Node, why).
		With(map[string]any{"node": r.Node, "reason": "node_gone"})
}

// restarted is the answer for a sandbox whose node restarted since.
func restarted(x *gateway.Exec, r record) *gateway.Error {
	return gateway.Errorf(gateway.TypeUnavailable, "the sandbox of job %s lived on node %s, which has restarted since (a start removes the sandboxes left behind); create a new sandbox with sandbox.create", x.JobID, r.Node).
		With(map[string]any{"node": r.Node, "reason": "node_restarted"})
}

// route runs a job's sandbox tool where its sandbox lives.
func (s *Service) route(tool string, f runFunc) runFunc {
	return func(s *Service, ctx context.Context, x *gateway.Exec) (any, error) {
		l := s.localityOf()
		if l == nil {
			return f(s, ctx, x)
		}
		if err := l.wait(ctx); err != nil {
			return nil, err
		}
		if err := checkJob(ctx, x); err != nil {
			return nil, err
		}
		switch tool {
		case ToolCreate:
			return l.create(ctx, x, f)
		case ToolDestroy:
			return l.destroy(ctx, x, f)
		}
		r, e, err := l.lookup(ctx, x)
		switch {
		case err != nil:
			return nil, err
		case !e.Exists:
			return nil, noSandbox(x)
		case l.mine(r):
			return l.local(ctx, x, f)
		case r.Node == l.node:
			return nil, restarted(x, r)
		}
		return l.forward(ctx, x, tool, r)
	}
}

// local runs f here, counted in the node's running calls.
func (l *locality) local(ctx context.Context, x *gateway.Exec, f runFunc) (any, error) {
	l.running.Add(1)
	defer l.running.Add(-1)
	return f(l.s, ctx, x)
}

// create records this node as the holder (taking over the record of a
// gone node), then creates the sandbox here; a failed create removes the
// record again.
func (l *locality) create(ctx context.Context, x *gateway.Exec, f runFunc) (any, error) {
	var a struct {
		ImageRef string `json:"image_ref"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	k := key(x.TaskID, x.JobID)
	var rev uint64
	err := jskv.CAS(ctx, "sandbox.create", func() error {
		r, e, err := l.lookup(ctx, x)
		if err != nil {
			return err
		}
		if e.Exists && !l.mine(r) && r.Node != l.node {
			if p, err := l.probe(ctx, x.Project, x.Call.ChannelID, r.Node); err == nil && p.Incarnation == r.Incarnation {
				return gateway.Errorf(gateway.TypeAlreadyExists, "job %s already has a sandbox, on node %s; use it, or destroy it first", x.JobID, r.Node)
			}
		}
		if e.Exists && l.mine(r) {
			rev = e.Revision // ours: the local create says whether it exists
			return nil
		}
		raw, _ := json.Marshal(record{Node: l.node, Incarnation: l.inc, ProjectID: x.Project, TaskID: x.TaskID, JobID: x.JobID,
			ImageRef: a.ImageRef, CreatedAt: x.Now, CreatedBy: x.Identity.AgentID})
		if e.Exists {
			rev, err = l.bucket.KV.Update(ctx, k, raw, e.Revision)
		} else {
			rev, err = l.bucket.KV.Create(ctx, k, raw)
		}
		return err
	})
	var ge *gateway.Error
	if errors.As(err, &ge) {
		return nil, ge
	}
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeUnavailable, "recording the sandbox of job %s (%s): %v; call again", x.JobID, Bucket, err)
	}
	out, err := l.local(ctx, x, f)
	if err != nil && (!errors.As(err, &ge) || ge.Type != gateway.TypeAlreadyExists) {
		if derr := l.bucket.KV.Delete(ctx, k, jetstream.LastRevision(rev)); derr != nil && !jskv.Conflict(derr) {
			l.log().Warn("cynode sandbox: the record of a failed sandbox.create stays", "job_id", x.JobID, "err", derr)
		}
	}
	return out, err
}

// destroy removes the sandbox where it lives, then its record; a sandbox
// whose node is gone only loses its record (destroyed, with lost saying
// why).
func (l *locality) destroy(ctx context.Context, x *gateway.Exec, f runFunc) (any, error) {
	r, e, err := l.lookup(ctx, x)
	if err != nil {
		return nil, err
	}
	if !e.Exists {
		return nil, noSandbox(x)
	}
	var out any
	var lost *gateway.Error
	switch {
	case l.mine(r):
		out, err = l.local(ctx, x, f)
	case r.Node == l.node:
		lost = restarted(x, r)
	default:
		out, err = l.forward(ctx, x, ToolDestroy, r)
		var ge *gateway.Error
		if errors.As(err, &ge) && ge.Type == gateway.TypeUnavailable && isNodeLoss(ge) {
			lost, err = ge, nil
		}
	}
	if err != nil {
		return nil, err
	}
	if derr := l.bucket.KV.Delete(ctx, key(x.TaskID, x.JobID), jetstream.LastRevision(e.Revision)); derr != nil && !jskv.Conflict(derr) {
		return nil, gateway.Errorf(gateway.TypeUnavailable, "removing the sandbox record of job %s (%s): %v; call sandbox.destroy again", x.JobID, Bucket, derr)
	}
	if lost != nil {
		return map[string]any{"task_id": x.TaskID, "job_id": x.JobID, "destroyed": true, "lost": lost.Message, "node": r.Node}, nil
	}
	return out, nil
}

// isNodeLoss: ge is gone or restarted.
func isNodeLoss(ge *gateway.Error) bool {
	d, _ := ge.Details.(map[string]any)
	why, _ := d["reason"].(string)
	return why == "node_gone" || why == "node_restarted"
}
