package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/utpmesh/utpmesh/services/cynode/artifact"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
	"github.com/utpmesh/utpmesh/services/cynode/internal/imagestore"
	"github.com/utpmesh/utpmesh/services/cynode/store"
)

// Tool names.
const (
	ToolCreate      = "sandbox.create"
	ToolExec        = "sandbox.exec"
	ToolPutFile     = "sandbox.put_file"
	ToolGetFile     = "sandbox.get_file"
	ToolStreamLogs  = "sandbox.stream_logs"
	ToolDestroy     = "sandbox.destroy"
	ToolImagesList  = "sandbox.allowed_images.list"
	ToolImagesAdd   = "sandbox.allowed_images.add"
	SettingAllowAdd = "agents.project_manager.sandbox.allow_add_to_allowed_images"
	// imageKeyPrefix are the system settings holding added images.
	imageKeyPrefix = gateway.AllowedImagePrefix
)

// maxLogBytes bounds a sandbox's log (older output is not kept beyond).
const maxLogBytes = 1 << 20

var (
	jobProps   = `"task_id":` + gateway.IDSchema + `,"job_id":` + gateway.IDSchema + `,"run_id":` + gateway.IDSchema
	jobParams  = `{"type":"object","additionalProperties":false,"required":["task_id","job_id"],"properties":{` + jobProps + `}}`
	pathSchema = `{"type":"string","minLength":1,"maxLength":1024}`
)

// Service runs the sandboxes under <data>/sandboxes.
type Service struct {
	cfg     gateway.SandboxConfig
	root    string
	dataDir string
	images  *imagestore.Store
	// cgroups is nil when execs are limited by rlimits; noCgroup says why.
	cgroups  *cgroups
	noCgroup string
	mu       sync.Mutex
	jobs     map[string]*sync.Mutex
	// holders keep the work dirs' tmpfs of a service that is not root,
	// by sandbox dir (guarded by mu).
	holders map[string]*holder
	// loc is the service's node (Serve; guarded by mu); nil: every
	// sandbox is local.
	loc *locality

	helperOnce sync.Once
	hostHelper *hostHelper
	helperErr  error
}

// New reaps what an earlier process left under <dataDir>/sandboxes,
// imports the configured images into <dataDir>/images and returns the
// service.
func New(ctx context.Context, cfg gateway.SandboxConfig, dataDir string) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	root := filepath.Join(dataDir, "sandboxes")
	if canMount() {
		if err := unmountUnder(root); err != nil {
			return nil, fmt.Errorf("cynode sandbox: reap %s: %w", root, err)
		}
	}
	if err := os.RemoveAll(root); err != nil {
		return nil, fmt.Errorf("cynode sandbox: reap %s: %w", root, err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("cynode sandbox: %w", err)
	}
	images, err := imagestore.Open(filepath.Join(dataDir, "images"), imagestore.Limits{MaxBytes: cfg.ImageMaxBytes, MaxFiles: cfg.ImageMaxFiles})
	if err != nil {
		return nil, fmt.Errorf("cynode sandbox: %w", err)
	}
	s := &Service{cfg: cfg, root: root, dataDir: dataDir, images: images, jobs: map[string]*sync.Mutex{}, holders: map[string]*holder{}}
	for i, src := range cfg.Images {
		if !filepath.IsAbs(src) {
			src = filepath.Join(dataDir, src)
		}
		if _, err := s.ImportImage(ctx, src); err != nil {
			return nil, fmt.Errorf("cynode sandbox: sandbox.images[%d]: %w", i, err)
		}
	}
	s.cgroups, s.noCgroup = setupCgroups(cfg.Cgroup)
	return s, nil
}

// ImportImage imports the images of an archive (a docker save tar file or
// an OCI image layout directory) into the local image store. They are
// usable once their ref is in the allowed images.
func (s *Service) ImportImage(ctx context.Context, src string) ([]imagestore.Image, error) {
	return s.images.Import(ctx, src, time.Now())
}

// Images lists the local image store.
func (s *Service) Images() ([]imagestore.Image, error) { return s.images.List() }

// LimitsEnforcedBy says how execs are limited ("cgroup" or "rlimit") and,
// for rlimits, why cgroups are not used.
func (s *Service) LimitsEnforcedBy() (string, string) {
	if s.cgroups != nil {
		return EnforcedByCgroup, ""
	}
	return EnforcedByRlimit, s.noCgroup
}

// Close removes the service's cgroup sub-tree and unmounts the work dirs'
// tmpfs (their content is gone, as after a restart).
func (s *Service) Close() {
	if s == nil {
		return
	}
	if l := s.localityOf(); l != nil {
		l.stop()
	}
	s.cgroups.close()
	if canMount() {
		_ = unmountUnder(s.root)
	}
	s.mu.Lock()
	hs := s.holders
	s.holders = map[string]*holder{}
	s.mu.Unlock()
	for _, h := range hs {
		h.stop()
	}
}

// holderOf returns the holder of a sandbox dir (nil: none).
func (s *Service) holderOf(dir string) *holder {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holders[dir]
}

// workView is the sandbox's work dir as the service reaches it: the host
// path, or through its holder's namespaces.
func (s *Service) workView(b box, m meta) (string, error) {
	if !m.JobDirHeld {
		return b.work, nil
	}
	h := s.holderOf(b.dir)
	if h == nil || !h.alive() {
		return "", gateway.Errorf(gateway.TypeUnavailable, "the process that holds this sandbox's work dir is gone (its content with it); destroy the sandbox and create it again")
	}
	return h.path(b.work), nil
}

func (s *Service) helper() (*hostHelper, error) {
	s.helperOnce.Do(func() { s.hostHelper, s.helperErr = findHelper() })
	if s.helperErr != nil {
		return nil, fmt.Errorf("image sandboxes need the host's setpriv to drop to the sandbox's uid: %w", s.helperErr)
	}
	return s.hostHelper, nil
}

// runFunc is a sandbox tool's implementation.
type runFunc func(*Service, context.Context, *gateway.Exec) (any, error)

// jobTools are the tools on a job's sandbox, run where it lives.
var jobTools = map[string]runFunc{
	ToolCreate: (*Service).create, ToolExec: (*Service).exec, ToolPutFile: (*Service).putFile, ToolGetFile: (*Service).getFile,
	ToolStreamLogs: (*Service).streamLogs, ToolDestroy: (*Service).destroy,
}

// forwardable is the tool a call forwarded to this node may run (create
// is never forwarded: the worker that takes it holds the sandbox).
func (s *Service) forwardable(tool string) runFunc {
	if tool == ToolCreate {
		return nil
	}
	return jobTools[tool]
}

// Specs are the sandbox tools; s nil gives the definitions only.
func Specs(s *Service) []gateway.Spec {
	run := func(f runFunc) func(context.Context, *gateway.Exec) (any, error) {
		return func(ctx context.Context, x *gateway.Exec) (any, error) {
			if s == nil {
				return nil, gateway.Errorf(gateway.TypeUnavailable, "the sandbox tools are not configured in this process")
			}
			return f(s, ctx, x)
		}
	}
	job := func(tool string) func(context.Context, *gateway.Exec) (any, error) {
		return run(s.route(tool, jobTools[tool]))
	}
	obj := func(required, props string) string {
		return `{"type":"object","additionalProperties":false,"required":["task_id","job_id"` + required + `],"properties":{` + jobProps + props + `}}`
	}
	return []gateway.Spec{
		{Name: ToolCreate, Description: "Creates the sandbox of a job from an allowed image (builtin:host-usr is built in): an empty work dir and an isolated runtime.",
			Params: obj(`,"image_ref"`, `,"image_ref":{"type":"string","minLength":1,"maxLength":512}`), Scope: gateway.ScopePM, TaskScoped: true, Run: job(ToolCreate)},
		{Name: ToolExec, Description: "Runs command with argv in the job's sandbox (no network, read-only system, rlimits, timeout); returns exit_code, size-limited stdout/stderr and limit_hit.",
			Params: obj(`,"command","argv"`, `,"command":{"type":"string","minLength":1,"maxLength":4096},"argv":{"type":"array","maxItems":256,"items":{"type":"string","maxLength":65536}},"timeout_ms":{"type":"integer","minimum":1}`),
			Scope:  gateway.ScopePM, TaskScoped: true, Run: job(ToolExec)},
		{Name: ToolPutFile, Description: "Writes a file (base64) into the sandbox's work dir at a relative path.",
			Params: obj(`,"path","content_bytes_base64"`, `,"path":`+pathSchema+`,"content_bytes_base64":{"type":"string","contentEncoding":"base64"}`),
			Scope:  gateway.ScopePM, TaskScoped: true, BinaryFields: []string{"content_bytes_base64"}, Run: job(ToolPutFile)},
		{Name: ToolGetFile, Description: "Reads a file of the sandbox's work dir (base64); symlinks leaving the work dir are refused.",
			Params: obj(`,"path"`, `,"path":`+pathSchema), Scope: gateway.ScopePM, TaskScoped: true, Run: job(ToolGetFile)},
		{Name: ToolStreamLogs, Description: "Returns the sandbox's log (every exec's command and output) from offset; page on with next_offset until eof.",
			Params: obj(``, `,"offset":{"type":"integer","minimum":0},"limit_bytes":{"type":"integer","minimum":1}`), Scope: gateway.ScopePM, TaskScoped: true, Run: job(ToolStreamLogs)},
		{Name: ToolDestroy, Description: "Removes the job's sandbox: its work dir, log and runtime.",
			Params: jobParams, Scope: gateway.ScopePM, TaskScoped: true, Run: job(ToolDestroy)},
		{Name: ToolImagesList, Description: "Lists the allowed sandbox images (the operator's and those PM agents added).",
			Params: `{"type":"object","additionalProperties":false,"properties":{` + gateway.PageSchema + `}}`, Scope: gateway.ScopePM, Run: run((*Service).listImages)},
		{Name: ToolImagesAdd, Description: "Adds an image reference to the allowed images; PM agents only, and only when the system setting " + SettingAllowAdd + " is true.",
			Params: `{"type":"object","additionalProperties":false,"required":["image_ref"],"properties":{"image_ref":{"type":"string","minLength":1,"maxLength":512},"name":{"type":"string","maxLength":200},"task_id":` + gateway.IDSchema + `}}`,
			Scope:  gateway.ScopePM, Run: run((*Service).addImage)},
	}
}

// meta is a sandbox's record on disk.
type meta struct {
	ProjectID string    `json:"project_id,omitempty"`
	TaskID    string    `json:"task_id"`
	JobID     string    `json:"job_id"`
	ImageRef  string    `json:"image_ref"`
	ImageID   string    `json:"image_id,omitempty"`
	Rootfs    string    `json:"rootfs,omitempty"`
	UID       int       `json:"uid"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by"`
	// JobDirLimited: the work dir is a tmpfs of JobDirBytes (mountWork,
	// or a holder's when JobDirHeld).
	JobDirLimited bool `json:"job_dir_limited,omitempty"`
	JobDirHeld    bool `json:"job_dir_held,omitempty"`
}

type box struct {
	dir, work, log string
	uid            int
}

func (s *Service) box(x *gateway.Exec) box {
	sum := sha256.Sum256([]byte(x.TaskID + "\x00" + x.JobID))
	dir := filepath.Join(s.root, hex.EncodeToString(sum[:16]))
	h := fnv.New32a()
	h.Write([]byte(x.TaskID + "\x00" + x.JobID))
	return box{dir: dir, work: filepath.Join(dir, "work"), log: filepath.Join(dir, "log"), uid: 200000 + int(h.Sum32()%100000)}
}

func (s *Service) lock(dir string) func() {
	s.mu.Lock()
	l, ok := s.jobs[dir]
	if !ok {
		l = &sync.Mutex{}
		s.jobs[dir] = l
	}
	s.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// checkJob requires job_id, a job of the call's task.
func checkJob(ctx context.Context, x *gateway.Exec) error {
	if x.JobID == "" {
		return gateway.Errorf(gateway.TypeInvalidArgument, "pass job_id (a job of task %s)", x.TaskID)
	}
	j, err := x.Store.GetJob(ctx, x.JobID)
	if err != nil || j.TaskID != x.TaskID {
		return gateway.Errorf(gateway.TypeNotFound, "job %s is not a job of task %s; pass one of its jobs", x.JobID, x.TaskID)
	}
	return nil
}

// open returns an existing sandbox.
func (s *Service) open(ctx context.Context, x *gateway.Exec) (box, error) {
	if err := checkJob(ctx, x); err != nil {
		return box{}, err
	}
	b := s.box(x)
	if _, err := os.Stat(filepath.Join(b.dir, "meta.json")); err != nil {
		return box{}, gateway.Errorf(gateway.TypeNotFound, "job %s has no sandbox; create it with sandbox.create", x.JobID)
	}
	return b, nil
}

func (s *Service) allowed(ctx context.Context, st store.Store) ([]map[string]any, error) {
	var out []map[string]any
	for _, im := range s.cfg.AllowedImages {
		out = append(out, map[string]any{"image_ref": im, "source": "config"})
	}
	cursor := ""
	for {
		page, next, err := st.ListSettings(ctx, store.Scope{Type: "system"}, imageKeyPrefix, store.Page{Limit: 100, Cursor: cursor})
		if err != nil {
			return nil, gateway.Errorf(gateway.TypeUnavailable, "reading the allowed images: %v", err)
		}
		for _, set := range page {
			m, _ := set.Value.(map[string]any)
			out = append(out, map[string]any{"image_ref": strings.TrimPrefix(set.Key, imageKeyPrefix), "name": m["name"], "source": "added", "added_by": set.UpdatedBy, "added_at": set.UpdatedAt})
		}
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

func (s *Service) create(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		ImageRef string `json:"image_ref"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	if err := checkJob(ctx, x); err != nil {
		return nil, err
	}
	imgs, err := s.allowed(ctx, x.Store)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(imgs, func(m map[string]any) bool { return sameRef(m["image_ref"], a.ImageRef) }) {
		return nil, gateway.Errorf(gateway.TypePolicyViolation, "image %q is not in the allowed images (sandbox.allowed_images.list); use %s or ask a PM agent to add it", a.ImageRef, gateway.BuiltinImage)
	}
	var img imagestore.Image
	if a.ImageRef != gateway.BuiltinImage {
		img, err = s.images.Resolve(a.ImageRef)
		if errors.Is(err, imagestore.ErrNotFound) {
			return nil, gateway.Errorf(gateway.TypeUnavailable, "image %q is allowed but not in the local image store; the operator imports it (sandbox.images in cynode.json: a docker save archive or an OCI image layout)", a.ImageRef)
		}
		if err != nil {
			return nil, gateway.Errorf(gateway.TypeInvalidArgument, "image_ref: %v", err)
		}
	}
	b := s.box(x)
	defer s.lock(b.dir)()
	if _, err := os.Stat(filepath.Join(b.dir, "meta.json")); err == nil {
		return nil, gateway.Errorf(gateway.TypeAlreadyExists, "job %s already has a sandbox; destroy it first or use it", x.JobID)
	}
	if err := os.MkdirAll(b.work, 0o700); err != nil {
		return nil, gateway.Errorf(gateway.TypeInternal, "sandbox dir: %v", err)
	}
	limited, held, unlimited := canMount(), false, ""
	if limited {
		if err := mountWork(b.work, s.cfg.JobDirBytes, b.uid); err != nil {
			_ = os.RemoveAll(b.dir)
			return nil, gateway.Errorf(gateway.TypeInternal, "sandbox dir: %v", err)
		}
	} else {
		hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		h, err := startHolder(hctx, b.work, s.cfg.JobDirBytes)
		cancel()
		if err != nil {
			unlimited = "the service is not root and could not keep a size-limited tmpfs in a user namespace of its own (" + err.Error() + "); /tmp is limited"
		} else {
			limited, held = true, true
			s.mu.Lock()
			s.holders[b.dir] = h
			s.mu.Unlock()
		}
	}
	m := meta{ProjectID: x.Project, TaskID: x.TaskID, JobID: x.JobID, ImageRef: a.ImageRef, ImageID: img.ID, Rootfs: img.Rootfs, UID: b.uid, CreatedAt: x.Now, CreatedBy: x.Identity.AgentID,
		JobDirLimited: limited, JobDirHeld: held}
	raw, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(b.dir, "meta.json"), raw, 0o600); err != nil {
		return nil, gateway.Errorf(gateway.TypeInternal, "sandbox meta: %v", err)
	}
	l := s.cfg
	out := map[string]any{"task_id": x.TaskID, "job_id": x.JobID, "image_ref": a.ImageRef, "workdir": "/work", "uid": b.uid, "network": "none",
		"limits": map[string]any{"memory_bytes": l.MemoryBytes, "cpu_seconds": l.CPUSeconds, "max_procs": l.MaxProcs, "max_file_bytes": l.MaxFileBytes,
			"max_output_bytes": l.MaxOutputBytes, "timeout_ms": l.TimeoutMS, "job_dir_bytes": l.JobDirBytes}, "seccomp": true}
	out["job_dir_limit"] = JobDirTmpfs
	if !limited {
		out["job_dir_limit"] = JobDirUnlimited
		out["job_dir_unlimited_reason"] = unlimited
	}
	if img.ID != "" {
		out["image_id"] = img.ID
	}
	by, why := s.LimitsEnforcedBy()
	out["limits_enforced_by"] = by
	if why != "" {
		out["cgroup_unavailable"] = why
	}
	return out, nil
}

func (s *Service) exec(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		Command   string   `json:"command"`
		Argv      []string `json:"argv"`
		TimeoutMS int      `json:"timeout_ms"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	timeout := s.cfg.TimeoutMS
	if a.TimeoutMS > 0 {
		if a.TimeoutMS > s.cfg.TimeoutMS {
			return nil, gateway.Errorf(gateway.TypeInvalidArgument, "timeout_ms %d is over sandbox.timeout_ms (%d); pass 1..%d", a.TimeoutMS, s.cfg.TimeoutMS, s.cfg.TimeoutMS)
		}
		timeout = a.TimeoutMS
	}
	b, err := s.open(ctx, x)
	if err != nil {
		return nil, err
	}
	defer s.lock(b.dir)()
	raw, err := os.ReadFile(filepath.Join(b.dir, "meta.json"))
	var m meta
	if err == nil {
		err = json.Unmarshal(raw, &m)
	}
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeInternal, "sandbox meta: %v", err)
	}
	if m.Rootfs != "" {
		if _, err := os.Stat(m.Rootfs); err != nil {
			return nil, gateway.Errorf(gateway.TypeUnavailable, "the image %s (%s) of this sandbox is no longer in the local image store; destroy the sandbox and create it again", m.ImageRef, m.ImageID)
		}
	}
	j := job{work: b.work, rootfs: m.Rootfs, uid: b.uid, limited: m.JobDirLimited, view: b.work}
	if m.JobDirHeld {
		if j.view, err = s.workView(b, m); err != nil {
			return nil, err
		}
		j.enter = s.holderOf(b.dir).enter()
	}
	res, err := s.run(ctx, j, append([]string{a.Command}, a.Argv...), time.Duration(timeout)*time.Millisecond)
	if errors.Is(err, ErrNoBwrap) {
		return nil, gateway.Errorf(gateway.TypeUnavailable, "%v", err)
	}
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeInternal, "%v", err)
	}
	s.appendLog(b, x, a.Command, a.Argv, res)
	return res, nil
}

func (s *Service) appendLog(b box, x *gateway.Exec, cmd string, argv []string, r ExecResult) {
	if st, err := os.Stat(b.log); err == nil && st.Size() >= maxLogBytes {
		return
	}
	f, err := os.OpenFile(b.log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	argvJSON, _ := json.Marshal(append([]string{cmd}, argv...))
	fmt.Fprintf(f, "[%s] exec %s\n%s%s[exit %d%s]\n", x.Now.Format(time.RFC3339), argvJSON, r.Stdout, r.Stderr, r.ExitCode, map[bool]string{true: ", limit " + r.LimitHit}[r.LimitHit != ""])
}

// openWork opens the sandbox's work dir (workView) as an os.Root: no path may
// leave it, through "..", an absolute name or a symlink.
func (s *Service) openWork(b box) (*os.Root, error) {
	raw, err := os.ReadFile(filepath.Join(b.dir, "meta.json"))
	var m meta
	if err == nil {
		err = json.Unmarshal(raw, &m)
	}
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeInternal, "sandbox meta: %v", err)
	}
	view, err := s.workView(b, m)
	if err != nil {
		return nil, err
	}
	r, err := os.OpenRoot(view)
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeInternal, "sandbox work dir: %v", err)
	}
	return r, nil
}

func escapeErr(p string, err error) error {
	return gateway.Errorf(gateway.TypePolicyViolation, "path %q leaves the sandbox's work dir (%v); pass a path inside /work that is not a symlink out of it", p, err).
		With(map[string]any{"limit": "work dir"})
}

func (s *Service) putFile(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		Path    string `json:"path"`
		Content string `json:"content_bytes_base64"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	if err := artifact.CheckPath(a.Path); err != nil {
		return nil, err
	}
	content, err := base64.StdEncoding.DecodeString(a.Content)
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "content_bytes_base64 is not standard base64: %v", err)
	}
	if int64(len(content)) > s.cfg.MaxFileBytes {
		return nil, gateway.Errorf(gateway.TypeSizeLimit, "the file is %d bytes, over sandbox.max_file_bytes (%d)", len(content), s.cfg.MaxFileBytes)
	}
	b, err := s.open(ctx, x)
	if err != nil {
		return nil, err
	}
	defer s.lock(b.dir)()
	r, err := s.openWork(b)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if dir := filepath.Dir(a.Path); dir != "." {
		if err := r.MkdirAll(dir, 0o755); err != nil {
			return nil, escapeErr(a.Path, err)
		}
	}
	// The last element is never followed: an existing symlink is refused.
	if fi, err := r.Lstat(a.Path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return nil, escapeErr(a.Path, errors.New("it is a symlink"))
	}
	f, err := r.OpenFile(a.Path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, escapeErr(a.Path, err)
	}
	if _, err := f.Write(content); err != nil {
		f.Close()
		if errors.Is(err, syscall.ENOSPC) {
			_ = r.Remove(a.Path)
			return nil, gateway.Errorf(gateway.TypeSizeLimit, "the sandbox's work dir is full: it holds at most %d bytes (sandbox.job_dir_bytes); remove files with sandbox.exec or destroy the sandbox", s.cfg.JobDirBytes).
				With(map[string]any{"limit": LimitJobDir, "limit_bytes": s.cfg.JobDirBytes})
		}
		return nil, gateway.Errorf(gateway.TypeInternal, "write: %v", err)
	}
	if os.Geteuid() == 0 {
		_ = f.Chown(b.uid, b.uid)
	}
	if err := f.Close(); err != nil {
		return nil, gateway.Errorf(gateway.TypeInternal, "write: %v", err)
	}
	return map[string]any{"path": a.Path, "size_bytes": len(content)}, nil
}

func (s *Service) getFile(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		Path string `json:"path"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	if err := artifact.CheckPath(a.Path); err != nil {
		return nil, err
	}
	b, err := s.open(ctx, x)
	if err != nil {
		return nil, err
	}
	defer s.lock(b.dir)()
	r, err := s.openWork(b)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if fi, err := r.Lstat(a.Path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return nil, escapeErr(a.Path, errors.New("it is a symlink"))
	}
	f, err := r.Open(a.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, gateway.Errorf(gateway.TypeNotFound, "no file %s in the sandbox's work dir", a.Path)
	}
	if err != nil {
		return nil, escapeErr(a.Path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "%s is not a regular file", a.Path)
	}
	limit := int64(x.Limits.MaxArtifactBytes)
	content, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeInternal, "read: %v", err)
	}
	if int64(len(content)) > limit {
		return nil, gateway.Errorf(gateway.TypeSizeLimit, "%s is over limits.max_artifact_bytes (%d); read it in pieces with sandbox.exec (head, split)", a.Path, limit)
	}
	return map[string]any{"path": a.Path, "size_bytes": len(content), "content_bytes_base64": base64.StdEncoding.EncodeToString(content)}, nil
}

func (s *Service) streamLogs(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		Offset     int64 `json:"offset"`
		LimitBytes int   `json:"limit_bytes"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	b, err := s.open(ctx, x)
	if err != nil {
		return nil, err
	}
	n := 64 << 10
	if a.LimitBytes > 0 && a.LimitBytes < n {
		n = a.LimitBytes
	}
	f, err := os.Open(b.log)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]any{"data": "", "offset": a.Offset, "next_offset": a.Offset, "eof": true}, nil
	}
	if err != nil {
		return nil, gateway.Errorf(gateway.TypeInternal, "log: %v", err)
	}
	defer f.Close()
	buf := make([]byte, n)
	k, err := f.ReadAt(buf, a.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, gateway.Errorf(gateway.TypeInternal, "log: %v", err)
	}
	st, _ := f.Stat()
	next := a.Offset + int64(k)
	return map[string]any{"data": strings.ToValidUTF8(string(buf[:k]), "\uFFFD"), "offset": a.Offset, "next_offset": next, "eof": st != nil && next >= st.Size()}, nil
}

func (s *Service) destroy(ctx context.Context, x *gateway.Exec) (any, error) {
	b, err := s.open(ctx, x)
	if err != nil {
		return nil, err
	}
	defer s.lock(b.dir)()
	s.mu.Lock()
	h := s.holders[b.dir]
	delete(s.holders, b.dir)
	s.mu.Unlock()
	h.stop()
	if canMount() {
		if err := unmountUnder(b.dir); err != nil {
			return nil, gateway.Errorf(gateway.TypeInternal, "remove the sandbox: %v", err)
		}
	}
	if err := os.RemoveAll(b.dir); err != nil {
		return nil, gateway.Errorf(gateway.TypeInternal, "remove the sandbox: %v", err)
	}
	return map[string]any{"task_id": x.TaskID, "job_id": x.JobID, "destroyed": true}, nil
}

func (s *Service) listImages(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		Limit  int    `json:"limit"`
		Cursor string `json:"cursor"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	page, err := x.Page(a.Limit, a.Cursor)
	if err != nil {
		return nil, err
	}
	all, err := s.allowed(ctx, x.Store)
	if err != nil {
		return nil, err
	}
	start := 0
	if page.Cursor != "" {
		if _, err := fmt.Sscanf(page.Cursor, "%d", &start); err != nil || start < 0 || start > len(all) {
			return nil, gateway.Errorf(gateway.TypeInvalidArgument, "cursor %q is not one this tool returned; pass next_cursor as given", page.Cursor)
		}
	}
	end := min(start+page.Limit, len(all))
	next := ""
	if end < len(all) {
		next = fmt.Sprint(end)
	}
	return map[string]any{"images": all[start:end], "next_cursor": next}, nil
}

func (s *Service) addImage(ctx context.Context, x *gateway.Exec) (any, error) {
	var a struct {
		ImageRef string `json:"image_ref"`
		Name     string `json:"name"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	if x.Identity.Type != gateway.PM {
		return nil, gateway.Errorf(gateway.TypeNotAllowed, "only PM agents may add sandbox images")
	}
	set, err := x.Store.GetSetting(ctx, store.Scope{Type: "system"}, SettingAllowAdd)
	if err != nil || set.Value != true {
		return nil, gateway.Errorf(gateway.TypeAccessDenied, "adding sandbox images is off: the system setting %s is not true (an operator sets it with db.system_setting.create|update)", SettingAllowAdd)
	}
	if strings.ContainsAny(a.ImageRef, " \t\n\x00") {
		return nil, gateway.Errorf(gateway.TypeInvalidArgument, "image_ref %q is not an image reference such as docker.io/library/python:3.12", a.ImageRef)
	}
	w := store.Write{By: x.Identity.AgentID, At: x.Now, Reason: "sandbox.allowed_images.add"}
	out, err := x.Store.CreateSetting(ctx, store.Scope{Type: "system"}, store.Setting{Key: imageKeyPrefix + a.ImageRef, Value: map[string]any{"name": a.Name}, ValueType: "object"}, w)
	if err != nil {
		return nil, err
	}
	return map[string]any{"image_ref": a.ImageRef, "name": a.Name, "added_by": out.UpdatedBy, "added_at": out.UpdatedAt}, nil
}

// sameRef: an allowed image names the requested one, literally or in the
// image store's normalized form (python:3.12 is
// docker.io/library/python:3.12).
func sameRef(allowed any, ref string) bool {
	a, _ := allowed.(string)
	if a == ref {
		return true
	}
	if a == gateway.BuiltinImage || ref == gateway.BuiltinImage {
		return false
	}
	na, err1 := imagestore.Normalize(a)
	nr, err2 := imagestore.Normalize(ref)
	return err1 == nil && err2 == nil && na == nr
}
