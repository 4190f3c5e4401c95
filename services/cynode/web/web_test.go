package web

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/services/cynode/internal/egress"
	"github.com/utpmesh/utpmesh/services/cynode/internal/gateway"
)

// TestRobotsAnswers: a robots.txt that is missing (4xx) allows the page;
// one that fails (5xx) disallows it (RFC 9309 §2.3.1).
func TestRobotsAnswers(t *testing.T) {
	for _, tc := range []struct {
		robotsStatus int
		allowed      bool
	}{{http.StatusNotFound, true}, {http.StatusForbidden, true}, {http.StatusInternalServerError, false}, {http.StatusServiceUnavailable, false}} {
		t.Run(fmt.Sprint(tc.robotsStatus), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/robots.txt" {
					w.WriteHeader(tc.robotsStatus)
					return
				}
				fmt.Fprint(w, "page")
			}))
			defer srv.Close()
			ap := netip.MustParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
			s, err := New(gateway.WebConfig{Projects: map[string]gateway.WebPolicy{"p": {Schemes: []string{"http"}, Domains: []string{"127.0.0.1"}, Ports: []int{int(ap.Port())}}}},
				&egress.Hooks{Allow: []netip.AddrPort{ap}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.fetch(context.Background(), &gateway.Exec{Project: "p", Args: []byte(fmt.Sprintf(`{"url":%q}`, srv.URL+"/page")), Now: time.Now()})
			if tc.allowed && err != nil {
				t.Fatalf("robots %d: %v", tc.robotsStatus, err)
			}
			if !tc.allowed && (err == nil || !strings.Contains(err.Error(), "robots.txt")) {
				t.Fatalf("robots %d: %v; want a robots.txt refusal", tc.robotsStatus, err)
			}
		})
	}
}
