package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
)

// DefaultTool is the probe tool's default name.
const DefaultTool = "conformance_probe"

// ProbeTimeoutSeconds is the probe entry's options.timeout_seconds.
const ProbeTimeoutSeconds = 5

// CrashExitCode is the exit status of a probe that crashes on purpose.
const CrashExitCode = 3

// ProbeParameters is the JSON Schema of the probe's arguments.
const ProbeParameters = `{"type":"object","additionalProperties":false,"required":["mode"],` +
	`"properties":{"mode":{"enum":["echo","fail","sleep","crash"]},"value":{},` +
	`"code":{"type":"string"},"message":{"type":"string"},` +
	`"ms":{"type":"integer","minimum":0},"marker":{"type":"string"}}}`

// The probe's modes.
const (
	ModeEcho  = "echo"
	ModeFail  = "fail"
	ModeSleep = "sleep"
	ModeCrash = "crash"
)

// ProbeArgs are the probe's arguments (see the package doc).
type ProbeArgs struct {
	Mode    string          `json:"mode"`
	Value   json.RawMessage `json:"value,omitempty"`
	Code    string          `json:"code,omitempty"`
	Message string          `json:"message,omitempty"`
	MS      int64           `json:"ms,omitempty"`
	Marker  string          `json:"marker,omitempty"`
}

// Probe is the Go implementation of the probe contract: a tool named name
// (DefaultTool when empty). exit ends the process in mode crash; nil means
// os.Exit.
func Probe(name string, exit func(code int)) worker.Tool {
	if name == "" {
		name = DefaultTool
	}
	if exit == nil {
		exit = os.Exit
	}
	return worker.Tool{
		Name:        name,
		Description: "The conformance kit's probe: echo, fail, sleep or crash as the arguments say (utpmesh conformance tool).",
		Parameters:  json.RawMessage(ProbeParameters),
		Options:     registry.Options{TimeoutSeconds: ProbeTimeoutSeconds},
		Handler: func(ctx context.Context, call *worker.Call) (worker.Result, error) {
			var a ProbeArgs
			if err := call.Bind(&a); err != nil {
				return worker.Result{}, err
			}
			before := 0
			if a.Marker != "" {
				n, err := appendMarker(a.Marker)
				if err != nil {
					return worker.Result{}, err
				}
				before = n
			}
			value := json.RawMessage("null")
			if len(a.Value) > 0 {
				value = a.Value
			}
			switch a.Mode {
			case ModeFail:
				return worker.Result{}, worker.Fail(card.ErrorCode(a.Code), a.Message)
			case ModeSleep:
				t := time.NewTimer(time.Duration(a.MS) * time.Millisecond)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
					return worker.Result{}, ctx.Err()
				}
			case ModeCrash:
				if before == 0 {
					exit(CrashExitCode)
					return worker.Result{}, fmt.Errorf("probe: crash mode: the process did not exit")
				}
			}
			return worker.OK(value), nil
		},
	}
}

// appendMarker appends a line to the marker file and returns how many
// lines it had before.
func appendMarker(path string) (int, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("probe: marker: %w", err)
	}
	defer f.Close()
	n, err := countLines(f)
	if err != nil {
		return 0, err
	}
	if _, err := f.WriteString("x\n"); err != nil {
		return 0, fmt.Errorf("probe: marker: %w", err)
	}
	return n, f.Sync()
}

func countLines(f *os.File) (int, error) {
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("probe: marker: %w", err)
	}
	return n, nil
}

// markerLines is the number of lines of a marker file (0 when absent).
func markerLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}
