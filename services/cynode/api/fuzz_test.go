package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	ct "github.com/utpmesh/utpmesh/services/cynode/internal/cynodetest"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
)

// FuzzParams feeds arbitrary params (what an agent sends) to api.call:
// the call succeeds or answers invalid_argument, never a panic, and what
// reaches the provider stays under the operation's path.
func FuzzParams(f *testing.F) {
	for _, s := range []string{`{"id":"x"}`, `{"id":".."}`, `{"id":"a/../b"}`, `{"id":1e400}`, `{"id":[1]}`, `{"q":[{"a":1}],"id":"%2e%2e"}`, `{"id":"\u0000"}`, `[]`, `null`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, params string) {
		if !json.Valid([]byte(params)) {
			return
		}
		e := start(t)
		before := e.p.count()
		v, err := e.d.Run(e.call, ct.PMAgent, map[string]any{"task_id": "t1", "provider": "open", "operation": "item", "params": json.RawMessage(params)})
		if err != nil {
			if err.Type != gateway.TypeInvalidArgument {
				t.Fatalf("params %s: %v", params, err)
			}
			if e.p.count() != before {
				t.Fatalf("params %s were refused but sent", params)
			}
			return
		}
		uri := e.p.last(t).uri
		path, _, _ := strings.Cut(uri, "?")
		seg := strings.TrimSuffix(strings.TrimPrefix(path, "/v1/items/"), "/detail")
		if !strings.HasPrefix(path, "/v1/items/") || !strings.HasSuffix(path, "/detail") || seg == "" || seg == "." || seg == ".." || strings.Contains(seg, "/") {
			t.Fatalf("params %s reached %s (result %v)", params, uri, v)
		}
	})
}
