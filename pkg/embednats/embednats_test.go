package embednats_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/embednats"
)

func TestMaxPayload(t *testing.T) {
	tests := []struct {
		name    string
		payload int32
		want    int64 // 0: Start must fail
	}{
		{"default", 0, embednats.DefaultMaxPayload},
		{"smallest", embednats.MinMaxPayload, embednats.MinMaxPayload},
		{"largest", embednats.MaxMaxPayload, embednats.MaxMaxPayload},
		{"too small", embednats.MinMaxPayload - 1, 0},
		{"negative", -1, 0},
		{"too large", embednats.MaxMaxPayload + 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := embednats.Start(embednats.Config{Port: -1, MaxPayload: tc.payload})
			if tc.want == 0 {
				if !errors.Is(err, embednats.ErrInvalidConfig) || !strings.Contains(err.Error(), "MaxPayload") {
					t.Fatalf("Start = %v, want ErrInvalidConfig naming MaxPayload", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Shutdown(context.Background())
			nc, err := srv.Connect()
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if got := nc.MaxPayload(); got != tc.want {
				t.Fatalf("client sees max payload %d, want %d", got, tc.want)
			}
		})
	}
}

func TestJetStreamNeedsDataDir(t *testing.T) {
	if _, err := embednats.Start(embednats.Config{Port: -1, JetStream: true}); !errors.Is(err, embednats.ErrInvalidConfig) {
		t.Fatalf("JetStream without DataDir: %v, want ErrInvalidConfig", err)
	}
}

// A start that cannot succeed fails at once with the reason. ReadyTimeout
// is ten minutes: a start that waited for it would hang the test instead.
func TestStartFailsAtOnce(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port
	notADir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(notADir, 0o700); err != nil {
		t.Fatal(err)
	}
	// JetStream's store directory is a regular file: the server's own
	// start fails (a fatal error, not a timeout).
	if err := os.WriteFile(filepath.Join(notADir, "jetstream"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     embednats.Config
		is      error
		message string
	}{
		{"busy port", embednats.Config{Port: busyPort}, embednats.ErrAddrInUse,
			"listen 127.0.0.1:" + strconv.Itoa(busyPort) + ": address already in use"},
		{"busy port, JetStream", embednats.Config{Port: busyPort, JetStream: true, DataDir: t.TempDir()}, embednats.ErrAddrInUse,
			"listen 127.0.0.1:" + strconv.Itoa(busyPort) + ": address already in use"},
		{"JetStream store unusable", embednats.Config{Port: -1, JetStream: true, DataDir: notADir}, embednats.ErrNotStarted,
			"embednats: nats-server did not start: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logged := &syncWriter{w: &strings.Builder{}}
			tc.cfg.ReadyTimeout = 10 * time.Minute
			tc.cfg.Logger = slog.New(slog.NewTextHandler(logged, &slog.HandlerOptions{Level: slog.LevelError}))
			srv, err := embednats.Start(tc.cfg)
			if err == nil {
				_ = srv.Shutdown(context.Background())
				t.Fatal("Start succeeded")
			}
			if !errors.Is(err, tc.is) || !strings.HasPrefix(err.Error(), tc.message) {
				t.Fatalf("Start = %v, want %v starting %q", err, tc.is, tc.message)
			}
			t.Log(err)
			if s := logged.String(); s != "" {
				t.Fatalf("a failed start logged (the caller reports the error once):\n%s", s)
			}
		})
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
