package embednats_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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
