package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/metrics"
)

// A process creates one Metrics, hands its observers to the worker runtime
// (worker.Config.Observer), the inbox (inboxsvc.Config.Observer) and the
// CardStore (boltstore.WithCommitObserver), and serves them.
func Example() {
	m := metrics.New("0.1.0")
	obs := m.Worker() // worker.Config{Observer: obs, ...}
	obs.Completed("echo", card.StatusSuccess, "", 4*time.Millisecond)

	srv, err := metrics.Serve(m, metrics.ServerConfig{Addr: "127.0.0.1:0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown(context.Background())
	resp, err := http.Get(srv.URL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "utpmesh_worker_calls_total") {
			fmt.Println(line)
		}
	}
	// Output:
	// utpmesh_worker_calls_total{code="",status="success",tool="echo"} 1
}
