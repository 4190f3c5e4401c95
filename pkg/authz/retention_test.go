package authz

import (
	"errors"
	"strings"
	"testing"
)

func TestProjectRetentionCheck(t *testing.T) {
	for _, tc := range []struct {
		r    *ProjectRetention
		want string // "" valid
	}{
		{nil, ""},
		{&ProjectRetention{}, ""},
		{&ProjectRetention{MaxAge: "720h", MaxBytes: 1 << 30}, ""},
		{&ProjectRetention{MaxAge: "30 days"}, "not a duration"},
		{&ProjectRetention{MaxAge: "10s"}, "shorter than 1m"},
		{&ProjectRetention{MaxBytes: -1}, "negative"},
	} {
		err := ProjectConfig{Retention: tc.r}.Check()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.r, err)
		case tc.want != "" && (!errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: got %v, want ErrInvalidRequest naming %q", tc.r, err, tc.want)
		}
	}
}
