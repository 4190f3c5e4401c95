package gateway

import "fmt"

// SandboxConfig configures sandbox.* (cynode.json "sandbox"). Zero
// fields take the defaults (DefaultSandbox).
type SandboxConfig struct {
	// AllowedImages are the operator's allowed image references (the
	// built-in image is BuiltinImage); PM agents may add more with
	// sandbox.allowed_images.add when the system setting
	// agents.project_manager.sandbox.allow_add_to_allowed_images is true.
	AllowedImages []string `json:"allowed_images,omitempty"`
	// MemoryBytes is RLIMIT_AS of every process of an exec.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// CPUSeconds is RLIMIT_CPU.
	CPUSeconds int `json:"cpu_seconds,omitempty"`
	// MaxProcs is RLIMIT_NPROC of the sandbox's own user id.
	MaxProcs int `json:"max_procs,omitempty"`
	// MaxFileBytes is RLIMIT_FSIZE: the largest file an exec may write.
	MaxFileBytes int64 `json:"max_file_bytes,omitempty"`
	// MaxOutputBytes bounds stdout and stderr (each); more kills the exec.
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
	// TimeoutMS is the wall-clock limit of an exec.
	TimeoutMS int `json:"timeout_ms,omitempty"`
}

// BuiltinImage is the built-in image: the host's /usr, read-only.
const BuiltinImage = "builtin:host-usr"

// DefaultSandbox are the sandbox limits when the configuration sets none.
var DefaultSandbox = SandboxConfig{AllowedImages: []string{BuiltinImage}, MemoryBytes: 256 << 20, CPUSeconds: 10, MaxProcs: 64,
	MaxFileBytes: 16 << 20, MaxOutputBytes: 64 << 10, TimeoutMS: 30000}

// WithDefaults fills zero fields.
func (s SandboxConfig) WithDefaults() SandboxConfig {
	d := DefaultSandbox
	if s.AllowedImages != nil {
		d.AllowedImages = s.AllowedImages
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
	return d
}

// Validate checks the sandbox configuration.
func (s SandboxConfig) Validate() error {
	if s.MemoryBytes < 0 || s.CPUSeconds < 0 || s.MaxProcs < 0 || s.MaxFileBytes < 0 || s.MaxOutputBytes < 0 || s.TimeoutMS < 0 {
		return fmt.Errorf("cynode config: sandbox limits must be positive (or left out for the defaults)")
	}
	for i, im := range s.AllowedImages {
		if im == "" {
			return fmt.Errorf("cynode config: sandbox.allowed_images[%d] is empty", i)
		}
	}
	return nil
}
