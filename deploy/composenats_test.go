package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"gopkg.in/yaml.v3"

	"github.com/utpmesh/utpmesh/internal/meshtest"
)

// loadComposeNATS parses compose-nats/compose.yaml.
func loadComposeNATS(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("compose-nats/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(false)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("compose-nats/compose.yaml: %v", err)
	}
	return f
}

// natsServices are the compose file's nats-server services, sorted.
func natsServices(f composeFile) []string {
	var out []string
	for name, s := range f.Services {
		if strings.HasPrefix(s.Image, "nats:") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// TestComposeNATSStructure checks the compose file of the mesh beside a
// NATS cluster offline: three nats-servers on nats.conf with each other as
// routes, the mesh joining them with the core seed init makes, every
// utpmesh line accepted by the real CLI.
func TestComposeNATSStructure(t *testing.T) {
	f := loadComposeNATS(t)
	nodes := natsServices(f)
	if len(nodes) != 3 {
		t.Fatalf("compose-nats: %d nats-server services (%v), want 3", len(nodes), nodes)
	}
	for _, n := range nodes {
		s := f.Services[n]
		routes, ok := flagValue(s.Command, "routes")
		if !ok {
			t.Fatalf("%s: no --routes", n)
		}
		for _, m := range nodes {
			if !strings.Contains(routes, "@"+m+":6222") {
				t.Errorf("%s: --routes %s lacks %s", n, routes, m)
			}
		}
		if !slices.Contains(s.Volumes, "./nats.conf:/etc/nats/nats.conf:ro") || !slices.Contains(s.Volumes, "shared:/etc/nats/shared:ro") {
			t.Errorf("%s: volumes %v; want nats.conf and the shared volume where nats.conf includes it", n, s.Volumes)
		}
	}
	init := f.Services["init"]
	if len(init.Command) != 1 || !strings.Contains(init.Command[0], "utpmesh nats-permissions --seeds /shared/seeds") {
		t.Fatalf("init: %v; want utpmesh nats-permissions --seeds /shared/seeds", init.Command)
	}
	// The seeds init makes: one per role it names.
	seeds := map[string]bool{}
	args := strings.Fields(strings.SplitN(init.Command[0], "--seeds /shared/seeds", 2)[1])
	for _, a := range args {
		if a == ">" {
			break
		}
		seeds["/shared/seeds/"+strings.ReplaceAll(a, ".", "_")+".nk"] = true
	}
	var ups int
	for name, c := range composeCommands(f) {
		checkParses(t, c)
		if creds, _ := flagValue(c.argv, "creds"); !seeds[creds] {
			t.Errorf("%s: --creds %q is no seed init makes (%v)", name, creds, seeds)
		}
		if c.argv[0] == "up" {
			ups++
			if u, _ := flagValue(c.argv, "nats"); u != "nats://nats1:4222,nats://nats2:4222,nats://nats3:4222" {
				t.Errorf("%s: --nats %q, want every nats-server", name, u)
			}
		}
	}
	if ups != 1 {
		t.Errorf("compose-nats: %d 'utpmesh up' services, want 1", ups)
	}
}

// TestComposeNATSOnLoopback runs the compose file on loopback: init's
// command (the real CLI), three nats-servers from nats.conf with its
// include (ports and routes moved to free loopback ports, the routes'
// password as compose passes it), the mesh's and the worker's command
// lines, and calls echo and ATLAS through the CLI as the admin user.
func TestComposeNATSOnLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 nats-servers, up and a worker")
	}
	f := loadComposeNATS(t)
	root := t.TempDir()
	shared := filepath.Join(root, "shared")
	if err := os.MkdirAll(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	// init, with /shared a directory and utpmesh the built CLI.
	script := strings.ReplaceAll(f.Services["init"].Command[0], "/shared", shared)
	initCmd := exec.Command("sh", "-c", script)
	initCmd.Env = []string{"PATH=" + filepath.Dir(cliBin) + ":" + os.Getenv("PATH"), "HOME=" + root}
	if out, err := initCmd.CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	// nats.conf beside the shared directory, as the services mount them.
	etc := filepath.Join(root, "etc")
	if err := os.MkdirAll(etc, 0o700); err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile("compose-nats/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(etc, "nats.conf"), conf, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(shared, filepath.Join(etc, "shared")); err != nil {
		t.Fatal(err)
	}
	const password = "a-route-password-for-the-test"
	t.Setenv("NATS_ROUTE_PASSWORD", password)
	nodes := natsServices(f)
	clientPort, routePort := map[string]string{}, map[string]string{}
	ports := meshtest.FreePorts(t, 2*len(nodes))
	for i, n := range nodes {
		clientPort[n], routePort[n] = ports[2*i], ports[2*i+1]
	}
	var servers []*server.Server
	for _, n := range nodes {
		t.Setenv("SERVER_NAME", f.Services[n].Environment["SERVER_NAME"])
		opts, err := server.ProcessConfigFile(filepath.Join(etc, "nats.conf"))
		if err != nil {
			t.Fatalf("%s: nats.conf: %v", n, err)
		}
		if opts.MaxPayload < 1<<20+64<<10 || !opts.SyncAlways || !opts.JetStream {
			t.Fatalf("nats.conf: max_payload %d, sync always %v, JetStream %v; want at least 1 MiB + 64 KiB, sync always, JetStream", opts.MaxPayload, opts.SyncAlways, opts.JetStream)
		}
		routes, _ := flagValue(f.Services[n].Command, "routes")
		routes = strings.ReplaceAll(routes, "${NATS_ROUTE_PASSWORD:?set NATS_ROUTE_PASSWORD to a random secret}", password)
		routes = strings.ReplaceAll(routes, "${NATS_ROUTE_PASSWORD}", password)
		for _, m := range nodes {
			routes = strings.ReplaceAll(routes, "@"+m+":6222", "@127.0.0.1:"+routePort[m])
		}
		opts.Routes = server.RoutesFromStr(routes)
		opts.Host, opts.Port = "127.0.0.1", atoi(t, clientPort[n])
		opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", atoi(t, routePort[n])
		opts.HTTPPort, opts.StoreDir = 0, filepath.Join(root, n+"-data")
		opts.NoLog, opts.NoSigs = true, true
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		s.Start()
		t.Cleanup(s.Shutdown)
		if !s.ReadyForConnections(30 * time.Second) {
			t.Fatalf("%s not ready", n)
		}
		servers = append(servers, s)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		current := true
		for _, s := range servers {
			current = current && s.JetStreamIsCurrent()
		}
		if current {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the nats-servers elected no JetStream meta leader within a minute")
		}
	}
	var urls []string
	for _, n := range nodes {
		urls = append(urls, "nats://127.0.0.1:"+clientPort[n])
	}
	url := strings.Join(urls, ",")
	loopback := func(svc string) []string {
		var out []string
		for _, a := range f.Services[svc].Command {
			for _, n := range nodes {
				a = strings.ReplaceAll(a, "nats://"+n+":4222", "nats://127.0.0.1:"+clientPort[n])
			}
			a = strings.Replace(a, "/shared/", shared+"/", 1)
			if a == "/data" {
				a = filepath.Join(root, svc+"-data")
			}
			out = append(out, a)
		}
		if v, ok := flagValue(out, "metrics-addr"); ok && v != "" {
			out = setFlag(out, "metrics-addr", "127.0.0.1:0")
		}
		return out
	}
	mesh := startLong(t, loopback("mesh")...)
	mesh.patience = 2 * time.Minute
	mesh.waitFor(t, "mesh ready")
	tasks := startLong(t, loopback("tasks")...)
	tasks.waitFor(t, "serving")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- mesh:\n%s\n--- tasks:\n%s", mesh.output(), tasks.output())
		}
	})
	admin := filepath.Join(shared, "seeds", "admin.nk")
	mandate := filepath.Join(root, "mesh-data", "demo-mandate.jwt")
	for _, c := range [][]string{
		{"call", "echo", "--args", `{"x":1}`},
		{"call", "TASK_CREATE", "--args", `{"title":"beside a NATS cluster"}`},
		{"call", "TASK_LIST", "--args", `{}`},
	} {
		code, out, errOut := run(t, nil, append(c, "--nats", url, "--creds", admin, "--mandate", mandate, "--wait-timeout", "30s")...)
		if code != 0 {
			t.Fatalf("utpmesh %s: exit %d\n%s\n%s", strings.Join(c, " "), code, out, errOut)
		}
		if c[1] == "TASK_LIST" && !strings.Contains(out, "beside a NATS cluster") {
			t.Fatalf("TASK_LIST = %s; want the task", out)
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
