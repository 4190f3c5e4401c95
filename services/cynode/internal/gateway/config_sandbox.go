package gateway

import (
	"fmt"
	"path/filepath"
)

// SandboxConfig configures sandbox.* (cynode.json "sandbox"). Zero
// fields take the defaults (DefaultSandbox).
type SandboxConfig struct {
	// AllowedImages are the operator's allowed image references (the
	// built-in image is BuiltinImage); PM agents may add more with
	// sandbox.allowed_images.add when the system setting
	// agents.project_manager.sandbox.allow_add_to_allowed_images is true.
	AllowedImages []string `json:"allowed_images,omitempty"`
	// Images are image archives (docker save tar files or OCI image
	// layout directories; absolute, or relative to the data directory)
	// imported into the local image store, <data>/images, when the service
	// starts. An image still has to be in the allowed images to be used.
	Images []string `json:"images,omitempty"`
	// ImageMaxBytes and ImageMaxFiles bound one imported image (the bytes
	// of its files and its entries over all layers; default 2 GiB and
	// 200000).
	ImageMaxBytes int64 `json:"image_max_bytes,omitempty"`
	ImageMaxFiles int   `json:"image_max_files,omitempty"`
	// Cgroup chooses how memory, processes and CPU are limited: "" (the
	// default) puts each exec in a cgroup v2 of its own under the
	// service's cgroup when that can delegate the memory, pids and cpu
	// controllers, else uses rlimits; "off" always uses rlimits; an
	// absolute path names a cgroup v2 directory delegated to the service.
	Cgroup string `json:"cgroup,omitempty"`
	// CPUs is an exec's cgroup cpu.max in CPUs (default 1; cgroups only).
	CPUs float64 `json:"cpus,omitempty"`
	// MemoryBytes is an exec's memory: cgroup memory.max (swap 0), or
	// RLIMIT_AS of every process without cgroups.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// CPUSeconds is RLIMIT_CPU.
	CPUSeconds int `json:"cpu_seconds,omitempty"`
	// MaxProcs is cgroup pids.max, or without cgroups RLIMIT_NPROC of the
	// sandbox's own user id.
	MaxProcs int `json:"max_procs,omitempty"`
	// MaxFileBytes is RLIMIT_FSIZE: the largest file an exec may write.
	MaxFileBytes int64 `json:"max_file_bytes,omitempty"`
	// MaxOutputBytes bounds stdout and stderr (each); more kills the exec.
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
	// TimeoutMS is the wall-clock limit of an exec.
	TimeoutMS int `json:"timeout_ms,omitempty"`
	// JobDirBytes bounds a sandbox's work dir (a tmpfs of its own when
	// the service is root) and each exec's /tmp: a write beyond fails
	// with ENOSPC.
	JobDirBytes int64 `json:"job_dir_bytes,omitempty"`
}

// BuiltinImage is the built-in image: the host's /usr, read-only.
const BuiltinImage = "builtin:host-usr"

// DefaultSandbox are the sandbox limits when the configuration sets none.
var DefaultSandbox = SandboxConfig{AllowedImages: []string{BuiltinImage}, MemoryBytes: 256 << 20, CPUSeconds: 10, MaxProcs: 64,
	MaxFileBytes: 16 << 20, MaxOutputBytes: 64 << 10, TimeoutMS: 30000, CPUs: 1, ImageMaxBytes: 2 << 30, ImageMaxFiles: 200_000, JobDirBytes: 256 << 20}

// WithDefaults fills zero fields.
func (s SandboxConfig) WithDefaults() SandboxConfig {
	d := DefaultSandbox
	if s.AllowedImages != nil {
		d.AllowedImages = s.AllowedImages
	}
	d.Images, d.Cgroup = s.Images, s.Cgroup
	if s.CPUs > 0 {
		d.CPUs = s.CPUs
	}
	if s.ImageMaxBytes > 0 {
		d.ImageMaxBytes = s.ImageMaxBytes
	}
	if s.ImageMaxFiles > 0 {
		d.ImageMaxFiles = s.ImageMaxFiles
	}
	if s.MemoryBytes > 0 {
		d.MemoryBytes = s.MemoryBytes
	}
	if s.CPUSeconds > 0 {
		d.CPUSeconds = s.CPUSeconds
	}
	if s.MaxProcs > 0 {
		d.MaxProcs = s.MaxProcs
	}
	if s.MaxFileBytes > 0 {
		d.MaxFileBytes = s.MaxFileBytes
	}
	if s.MaxOutputBytes > 0 {
		d.MaxOutputBytes = s.MaxOutputBytes
	}
	if s.TimeoutMS > 0 {
		d.TimeoutMS = s.TimeoutMS
	}
	if s.JobDirBytes > 0 {
		d.JobDirBytes = s.JobDirBytes
	}
	return d
}

// Validate checks the sandbox configuration.
func (s SandboxConfig) Validate() error {
	if s.MemoryBytes < 0 || s.CPUSeconds < 0 || s.MaxProcs < 0 || s.MaxFileBytes < 0 || s.MaxOutputBytes < 0 || s.TimeoutMS < 0 ||
		s.CPUs < 0 || s.ImageMaxBytes < 0 || s.ImageMaxFiles < 0 || s.JobDirBytes < 0 {
		return fmt.Errorf("cynode config: sandbox limits must be positive (or left out for the defaults)")
	}
	if c := s.Cgroup; c != "" && c != "off" && !filepath.IsAbs(c) {
		return fmt.Errorf("cynode config: sandbox.cgroup %q: use \"\" (automatic), \"off\" (rlimits only) or the absolute path of a delegated cgroup v2 directory", c)
	}
	for i, im := range s.Images {
		if im == "" {
			return fmt.Errorf("cynode config: sandbox.images[%d] is empty; name a docker save archive or an OCI image layout directory", i)
		}
	}
	for i, im := range s.AllowedImages {
		if im == "" {
			return fmt.Errorf("cynode config: sandbox.allowed_images[%d] is empty", i)
		}
	}
	return nil
}
