package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/pkg/agent"
	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/config"
	"github.com/utpmesh/utpmesh/pkg/mandate"
	"github.com/utpmesh/utpmesh/pkg/mesh"
	"github.com/utpmesh/utpmesh/services/atp/notify/notifytest"
	"github.com/utpmesh/utpmesh/services/atp/octo"
	"github.com/utpmesh/utpmesh/services/atp/octo/octotest"
)

// TestConfigRefusedAtStart: up and worker refuse a configuration file
// with mistakes before they start anything, naming each mistake's line
// and the fix, and never its secrets.
func TestConfigRefusedAtStart(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(bad, []byte(`atp:
  notify:
    sms:
      url: https://sms.example.org/send
      tokn: hunter2
    whatsapp: {url: 'http://wa.example.org/send?key=hunter2'}
atlas:
  tasks: {}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"up", "--data", filepath.Join(dir, "data"), "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "", "--config", bad},
		{"worker", "--nats", "nats://127.0.0.1:1", "--data", filepath.Join(dir, "wdata"), "--config", bad, "atp"},
		{"up", "--data", filepath.Join(dir, "data"), "--config", filepath.Join(dir, "missing.yaml")},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, env{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }})
		msg := errb.String()
		if code != 2 {
			t.Fatalf("%v: exit %d, want 2\n%s", args, code, msg)
		}
		if strings.HasSuffix(args[len(args)-1], "missing.yaml") {
			wantContains(t, "missing file", msg, "--config: config: cannot read the file", "missing.yaml")
			continue
		}
		wantContains(t, args[0], msg, "--config: 3 problems:\n  ",
			bad+`:5: atp.notify.sms: unknown key "tokn"; did you mean "token"?`,
			bad+":6: atp.notify.whatsapp.url: http://wa.example.org/send is plain http",
			bad+`:7: unknown section "atlas": no catalogue of this build reads it (sections: atp, cynode)`)
		if strings.Contains(msg, "hunter2") {
			t.Errorf("%s shows a secret:\n%s", args[0], msg)
		}
	}
	for _, d := range []string{"data", "wdata"} {
		if _, err := os.Stat(filepath.Join(dir, d)); !os.IsNotExist(err) {
			t.Errorf("%s was created before the configuration was checked (%v)", d, err)
		}
	}
}

// TestUpConfigFile: 'utpmesh up --config' gives the shipped binary what
// only Go could set: atp_notify_traveller delivers through a local SMTP
// sink and a local webhook, and atp_search_activities bridges a local
// OCTO supplier, partial when another supplier fails.
func TestUpConfigFile(t *testing.T) {
	root := t.TempDir()
	sink := notifytest.StartSMTP(t, "", "")
	sms := notifytest.StartWebhook(t, http.StatusOK, `{"message_id":"sms-42"}`)
	sup := octotest.Start(t, "octo-key", []octo.Product{{ID: "prod-kayak", InternalName: "Sea kayak tour",
		Options: []octo.Option{{ID: "opt-am", Default: true, Units: []octo.Unit{{ID: "unit-adult", Type: "ADULT"}}}}}},
		map[string][]octo.Availability{"opt-am": {{ID: "slot-am", LocalDateTimeStart: "2027-01-18T09:00:00+09:00", Available: true, Status: "FREESALE"}}})
	down := notifytest.StartWebhook(t, http.StatusServiceUnavailable, `{"error":"INTERNAL_SERVER_ERROR"}`)
	_, port, _ := strings.Cut(sink.Addr, ":")
	cfg := filepath.Join(root, "mesh.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`atp:
  notify:
    smtp: {host: 127.0.0.1, port: %s, from: atp@example.test}
    sms: {url: '%s/sms', token: sms-token}
  octo:
    suppliers:
      - {id: kayak, base_url: '%s', api_key: octo-key, category: WATER}
      - {id: down, base_url: '%s', api_key: other-key}
cynode:
  web:
    projects:
      demo: {domains: [example.org]}
`, port, sms.URL, sup.URL, down.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "data")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var errb syncBuffer
	done := make(chan int, 1)
	go func() {
		defer pw.Close()
		done <- run(ctx, []string{"up", "--data", dir, "--nats-listen", "127.0.0.1:0", "--metrics-addr", "", "--ui-listen", "", "--services", "atp,echo", "--config", cfg},
			env{stdout: pw, stderr: &errb, getenv: func(string) string { return "" }})
	}()
	var url, bookingID string
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		l := sc.Text()
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "NATS" {
			url = f[1]
		}
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "atp        demo booking "); ok {
			bookingID, _, _ = strings.Cut(rest, " ")
		}
		if strings.HasPrefix(l, "Press Ctrl-C") {
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if url == "" || bookingID == "" {
		t.Fatalf("up printed no NATS URL or demo booking; stderr:\n%s", errb.String())
	}
	wantContains(t, "up's log", errb.String(), "atp: configured from "+cfg, "EMAIL=smtp 127.0.0.1:"+port, "SMS=webhook "+sms.URL+"/sms",
		"config: section cynode of "+cfg+" is not used: this process does not serve cynode")
	cm := &cliMesh{url: url}
	mand := filepath.Join(dir, "demo-mandate.jwt")
	creds := filepath.Join(dir, "creds", "admin.nk")
	call := func(tool, args string) string {
		return cm.must(t, 0, "call", tool, "--mandate", mand, "--creds", creds, "--json", "--args", args).stdout
	}
	wantContains(t, "EMAIL", call("atp_notify_traveller", `{"booking_object_id":"`+bookingID+`","recipient_participant_id":"p-ben","channel":"EMAIL","message_body":"Boots at 08:30"}`),
		`"delivery_status": "SENT"`)
	if m := sink.Mails(); len(m) != 1 || m[0].To[0] != "ben@example.test" || !strings.Contains(m[0].Data, "Boots at 08:30") {
		t.Fatalf("mails: %+v", m)
	}
	wantContains(t, "SMS", call("atp_notify_traveller", `{"booking_object_id":"`+bookingID+`","recipient_participant_id":"p-aiko","channel":"SMS","message_body":"Lesson at 10:00"}`),
		`"provider_message_id": "sms-42"`)
	if h := sms.Hooks(); len(h) != 1 || h[0].Header.Get("Authorization") != "Bearer sms-token" {
		t.Fatalf("webhook calls: %+v", h)
	}
	wantContains(t, "search", call("atp_search_activities", `{"date":"2027-01-18","category":"WATER"}`), `"status": "partial"`, `"octo:kayak:prod-kayak:opt-am"`)
	if strings.Contains(errb.String(), "sms-token") || strings.Contains(errb.String(), "octo-key") {
		t.Errorf("up's log shows a secret:\n%s", errb.String())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("up exited %d\n%s", code, errb.String())
	}
}

// TestConfigExampleInDocs: the example file of docs/operations.md
// ("Configuration file") is valid for this build.
func TestConfigExampleInDocs(t *testing.T) {
	raw, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	i := strings.Index(text, "\n## Configuration file\n")
	if i < 0 {
		t.Fatal(`docs/operations.md has no "## Configuration file" section`)
	}
	text = text[i+1:]
	start := strings.Index(text, "```yaml\n")
	if start < 0 {
		t.Fatal(`the "Configuration file" section has no yaml block`)
	}
	text = text[start+len("```yaml\n"):]
	end := strings.Index(text, "\n```")
	example := text[:end+1]
	for _, v := range []string{"ATP_SMTP_PASSWORD", "ATP_SMS_TOKEN", "ATP_SMS_SECRET", "ATP_WHATSAPP_TOKEN", "OCTO_KAYAK_KEY", "OCTO_BIKES_KEY"} {
		t.Setenv(v, "value-of-"+v)
	}
	f, err := config.Parse("docs/operations.md example", []byte(example), configSections()...)
	if err != nil {
		t.Fatalf("the example is refused:\n%v\n%s", err, example)
	}
	if got := strings.Join(f.Names(), ","); got != "atp,cynode" {
		t.Fatalf("the example has sections %s, want every section of this build (atp,cynode)", got)
	}
}

// TestWorkerConfigFile: 'utpmesh worker atp --config' in its own process
// bridges the file's OCTO suppliers; the search is partial because one
// of them fails.
func TestWorkerConfigFile(t *testing.T) {
	root := t.TempDir()
	cm := startServicesMesh(t, root, []string{"echo"}, func(dir string) *mesh.AuthConfig {
		return &mesh.AuthConfig{Catalogues: authCatalogues(dir)}
	})
	ctx := context.Background()
	if _, err := cm.m.Auth().Store.PutPolicies(ctx, "demo", `permit(principal, action == ATPAction::"search_activities", resource);`); err != nil {
		t.Fatal(err)
	}
	sup := octotest.Start(t, "octo-key", []octo.Product{{ID: "prod-bike", InternalName: "E-bike rental", Options: []octo.Option{{ID: "opt-day", Default: true}}}},
		map[string][]octo.Availability{"opt-day": {{ID: "slot-day", LocalDateTimeStart: "2027-01-18T00:00:00+09:00", Available: true, Status: "FREESALE"}}})
	down := notifytest.StartWebhook(t, http.StatusBadGateway, "")
	cfg := filepath.Join(root, "worker.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("atp:\n  octo:\n    suppliers:\n      - {id: bikes, base_url: '%s', api_key: octo-key, category: OUTDOOR}\n      - {id: down, base_url: '%s', api_key: k}\n",
		sup.URL, down.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	child := startProc(t, "worker", "--nats", cm.url, "--data", filepath.Join(root, "worker"), "--config", cfg, "--log-level", "debug", "atp")
	child.waitLine(t, "worker serving")
	key, err := cm.m.Auth().Keys.Load(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := mandate.Issue(key, mandate.Claims{Subject: "finder", ExpiresAt: time.Now().Add(time.Hour).Unix(),
		Mandate: mandate.Grant{PolicySet: `permit(principal, action == ATPAction::"search_activities", resource);`}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(cm.m.Conn(), agent.Config{Project: "demo", AgentID: "finder", Mandate: tok})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := ag.Call(cctx, agent.CallRequest{ToolName: "atp_search_activities", Arguments: json.RawMessage(`{"date":"2027-01-18","category":"OUTDOOR"}`), AgentTurnID: "cfg-1"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Result.Status != card.StatusPartial || !strings.Contains(string(out.Result.Result), `"activity_id":"octo:bikes:prod-bike:opt-day"`) {
		t.Fatalf("search: %s %s %+v", out.Result.Status, out.Result.Result, out.Result.Error)
	}
	child.mu.Lock()
	log := strings.Join(child.lines, "\n")
	child.mu.Unlock()
	wantContains(t, "worker log", log, "atp: configured from "+cfg, "bikes="+sup.URL)
}
