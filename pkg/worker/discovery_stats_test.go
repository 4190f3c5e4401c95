package worker_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/echo"
)

// statsOf asks $SRV.STATS (of every instance, or of one id) and returns
// the data of the endpoint of tool.
func (h *harness) statsOf(id, tool string) worker.ToolStats {
	h.t.Helper()
	subj, err := micro.ControlSubject(micro.StatsVerb, worker.ServiceName, id)
	if err != nil {
		h.t.Fatal(err)
	}
	msg, err := h.nc.Request(subj, nil, 5*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	var stats micro.Stats
	if err := json.Unmarshal(msg.Data, &stats); err != nil {
		h.t.Fatal(err)
	}
	for _, e := range stats.Endpoints {
		if e.Name == worker.EndpointName(tool) {
			var d worker.ToolStats
			if err := json.Unmarshal(e.Data, &d); err != nil {
				h.t.Fatalf("STATS data of %s = %s: %v", tool, e.Data, err)
			}
			return d
		}
	}
	h.t.Fatalf("STATS has no endpoint for %s: %+v", tool, stats.Endpoints)
	return worker.ToolStats{}
}

// TestStatsCountToolCalls: after N tool calls (which arrive through
// JetStream, not as micro requests), $SRV.STATS shows N in the data of
// that tool's endpoint, and INFO's metadata says where the counts are.
func TestStatsCountToolCalls(t *testing.T) {
	h := newHarness(t, worker.Config{InstanceID: "inst-stats"}, echo.Tool())
	msg, err := h.nc.Request("$SRV.PING."+worker.ServiceName, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ping micro.Ping
	if err := json.Unmarshal(msg.Data, &ping); err != nil || ping.ID == "" {
		t.Fatalf("ping = %s (%v)", msg.Data, err)
	}
	steps := []struct {
		args       string
		calls      uint64
		failed     uint64
		wantStatus string
	}{
		{`{"n":1}`, 1, 0, "success"},
		{`{"n":2}`, 2, 0, "success"},
		{`{"sleep_ms":-1}`, 3, 1, "failed"}, // bad_request: a call, and a failed one
		{`{"n":4}`, 4, 1, "success"},
	}
	for _, st := range steps {
		c := h.writeCall("echo", st.args)
		h.publish(toolSubject("echo"), c.command("echo"), nil)
		r, _ := h.awaitReport(c.id)
		if string(r.Status) != st.wantStatus {
			t.Fatalf("call %s ended %s, want %s", st.args, r.Status, st.wantStatus)
		}
		for _, id := range []string{"", ping.ID} {
			if got := h.statsOf(id, "echo"); got.Calls != st.calls || got.Failed != st.failed || got.InFlight != 0 {
				t.Fatalf("after %d calls, STATS (id %q) echo data = %+v, want calls %d, failed %d", st.calls, id, got, st.calls, st.failed)
			}
		}
	}
	if got := h.statsOf(ping.ID, "list_tools"); got.Calls != 0 {
		t.Fatalf("list_tools data = %+v, want no calls", got)
	}

	infoSubj, _ := micro.ControlSubject(micro.InfoVerb, worker.ServiceName, ping.ID)
	msg, err = h.nc.Request(infoSubj, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Metadata[worker.MetaStats] != worker.StatsNote {
		t.Errorf("service metadata %q = %q, want the stats note", worker.MetaStats, info.Metadata[worker.MetaStats])
	}
	for _, e := range info.Endpoints {
		if e.Metadata[worker.MetaStats] != worker.StatsNote {
			t.Errorf("endpoint %s metadata %q = %q, want the stats note", e.Name, worker.MetaStats, e.Metadata[worker.MetaStats])
		}
	}
}
