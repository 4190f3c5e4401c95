package deploy

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// composeFile is the part of a compose file the tests check.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image      string            `yaml:"image"`
	Build      map[string]string `yaml:"build"`
	Hostname   string            `yaml:"hostname"`
	Entrypoint []string          `yaml:"entrypoint"`
	Command    []string          `yaml:"command"`
	Restart    string            `yaml:"restart"`
	StopSignal string            `yaml:"stop_signal"`
	StopGrace  string            `yaml:"stop_grace_period"`
	DependsOn  map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	Deploy      struct {
		Replicas *int `yaml:"replicas"`
	} `yaml:"deploy"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("compose/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(false) // x- extension fields are compose's own
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("compose/compose.yaml: %v", err)
	}
	return f
}

// composeCommands are the utpmesh command lines of the compose services
// whose entrypoint is the image's (utpmesh).
func composeCommands(f composeFile) map[string]cmdline {
	out := map[string]cmdline{}
	for name, s := range f.Services {
		if len(s.Entrypoint) == 0 && len(s.Command) > 0 {
			out[name] = cmdline{src: "compose.yaml service " + name, argv: s.Command}
		}
	}
	return out
}

// TestComposeStructure checks that the compose file's parts fit together:
// one image, an init step before the nodes, three 'up' nodes forming one
// cluster on each other's names, health checks on each process's metrics
// port, every path a command names on a mounted volume, workers pointed at
// the nodes.
func TestComposeStructure(t *testing.T) {
	f := loadCompose(t)
	cmds := composeCommands(f)
	var nodes, workers []string
	for name, c := range cmds {
		switch c.argv[0] {
		case "up":
			nodes = append(nodes, name)
		case "worker":
			workers = append(workers, name)
		}
	}
	slices.Sort(nodes)
	slices.Sort(workers)
	if len(nodes) != 3 {
		t.Fatalf("compose: %d 'utpmesh up' services (%v), want 3", len(nodes), nodes)
	}
	if len(workers) == 0 {
		t.Fatal("compose: no 'utpmesh worker' service")
	}
	initSvc, ok := f.Services["init"]
	if !ok || len(initSvc.Entrypoint) != 1 || initSvc.Entrypoint[0] != "utpmesh-init" {
		t.Fatalf("compose: want a service init with entrypoint [utpmesh-init], got %+v", initSvc)
	}
	image := initSvc.Image
	for name, s := range f.Services {
		if s.Image != image {
			t.Errorf("service %s: image %q, want the one image %q", name, s.Image, image)
		}
		if s.Build != nil && s.Build["dockerfile"] != "deploy/docker/Dockerfile" {
			t.Errorf("service %s: build.dockerfile %q, want deploy/docker/Dockerfile", name, s.Build["dockerfile"])
		}
		if s.Build != nil && !fileExists(filepath.Join("compose", s.Build["context"], s.Build["dockerfile"])) {
			t.Errorf("service %s: build context %q and dockerfile %q name no file", name, s.Build["context"], s.Build["dockerfile"])
		}
		for dep := range s.DependsOn {
			if _, ok := f.Services[dep]; !ok {
				t.Errorf("service %s depends on %s, which is not a service", name, dep)
			}
		}
		for _, v := range s.Volumes {
			src := strings.Split(v, ":")[0]
			if _, ok := f.Volumes[src]; !ok {
				t.Errorf("service %s mounts volume %q, which is not declared under volumes", name, src)
			}
		}
	}

	// The init step first, then every node; workers after the nodes.
	for _, n := range nodes {
		if f.Services[n].DependsOn["init"].Condition != "service_completed_successfully" {
			t.Errorf("node %s: want depends_on init: service_completed_successfully (the shared files exist before any node starts)", n)
		}
	}
	for _, w := range workers {
		for _, n := range nodes {
			if _, ok := f.Services[w].DependsOn[n]; !ok {
				t.Errorf("worker %s: want depends_on %s", w, n)
			}
		}
	}
	initShared := mountPoint(t, "init", initSvc.Volumes, initSvc.Command[0])

	// One cluster: the same name, routes, secret and shared files on every
	// node; the routes name every node at its route port.
	var want []string
	same := map[string]string{}
	names := map[string]bool{}
	for _, n := range nodes {
		s, argv := f.Services[n], cmds[n].argv
		name, _ := flagValue(argv, "server-name")
		if name != n || s.Hostname != n {
			t.Errorf("node %s: --server-name %q, hostname %q; want both %q (the routes dial the service name)", n, name, s.Hostname, n)
		}
		if names[name] {
			t.Errorf("node %s: server name %q used twice", n, name)
		}
		names[name] = true
		_, port, err := net.SplitHostPort(mustFlag(t, cmds[n], "cluster-listen"))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("nats-route://%s:%s", n, port))
		for _, fl := range []string{"cluster-name", "routes", "cluster-secret-file", "creds-dir", "keys-dir"} {
			v := mustFlag(t, cmds[n], fl)
			if prev, ok := same[fl]; ok && prev != v {
				t.Errorf("node %s: --%s %q, another node has %q: every node needs the same", n, fl, v, prev)
			}
			same[fl] = v
		}
		for _, fl := range []string{"data", "cluster-secret-file", "creds-dir", "keys-dir"} {
			mountPoint(t, n, s.Volumes, mustFlag(t, cmds[n], fl))
		}
		for _, fl := range []string{"cluster-secret-file", "creds-dir", "keys-dir"} {
			if m := mountPoint(t, n, s.Volumes, mustFlag(t, cmds[n], fl)); m != initShared {
				t.Errorf("node %s: --%s is on volume %q, but init writes the shared files to %q", n, fl, m, initShared)
			}
		}
		checkHealth(t, n, s, cmds[n])
		if s.StopSignal != "SIGTERM" || s.StopGrace == "" {
			t.Errorf("node %s: want stop_signal SIGTERM and a stop_grace_period above --drain-timeout", n)
		}
	}
	if got := strings.Split(same["routes"], ","); !slices.Equal(sorted(got), sorted(want)) {
		t.Errorf("--routes %v, want every node: %v", got, want)
	}

	// Workers: pointed at the nodes' client ports, health on their metrics
	// port, a stateful one never scaled.
	for _, w := range workers {
		s, c := f.Services[w], cmds[w]
		for _, u := range strings.Split(mustFlag(t, c, "nats"), ",") {
			host, port, ok := strings.Cut(strings.TrimPrefix(u, "nats://"), ":")
			if !ok || !slices.Contains(nodes, host) {
				t.Errorf("worker %s: --nats %s names no node", w, u)
				continue
			}
			_, np, _ := net.SplitHostPort(mustFlag(t, cmds[host], "nats-listen"))
			if port != np {
				t.Errorf("worker %s: --nats %s, but %s listens on port %s", w, u, host, np)
			}
		}
		checkHealth(t, w, s, c)
		if cr, ok := flagValue(c.argv, "creds"); ok {
			mountPoint(t, w, s.Volumes, cr)
		}
		if d, ok := flagValue(c.argv, "data"); ok {
			if m := mountPoint(t, w, s.Volumes, d); m == initShared {
				t.Errorf("worker %s: --data on the shared volume", w)
			}
			if s.Deploy.Replicas != nil && *s.Deploy.Replicas > 1 {
				t.Errorf("worker %s keeps files in --data but runs %d replicas", w, *s.Deploy.Replicas)
			}
		}
	}
}

// TestComposeCommands runs the CLI over every utpmesh command line of the
// compose file, and starts each as far as its pre-start checks go with the
// files utpmesh-init makes laid out as the volumes mount them.
func TestComposeCommands(t *testing.T) {
	f := loadCompose(t)
	root := t.TempDir()
	sharedMount := f.Services["init"].Command[0]
	copyTree(t, shared(t), filepath.Join(root, sharedMount), false)
	for name, c := range composeCommands(f) {
		t.Run(name, func(t *testing.T) {
			checkParses(t, c)
			checkStarts(t, root, c)
		})
	}
}

// mountPoint returns the volume of service svc mounted at the deepest
// mount point holding path; it fails when none does.
func mountPoint(t *testing.T, svc string, volumes []string, path string) string {
	t.Helper()
	best, vol := "", ""
	for _, v := range volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			continue
		}
		if (path == parts[1] || strings.HasPrefix(path, strings.TrimSuffix(parts[1], "/")+"/")) && len(parts[1]) > len(best) {
			best, vol = parts[1], parts[0]
		}
	}
	if vol == "" {
		t.Errorf("service %s: %s is on no mounted volume (%v)", svc, path, volumes)
	}
	return vol
}

var healthURL = regexp.MustCompile(`^http://127\.0\.0\.1:(\d+)/healthz$`)

// checkHealth checks that the service's health check asks /healthz on the
// port of its --metrics-addr.
func checkHealth(t *testing.T, name string, s composeService, c cmdline) {
	t.Helper()
	addr, ok := flagValue(c.argv, "metrics-addr")
	if !ok || addr == "" {
		t.Errorf("service %s: no --metrics-addr, so no /healthz for its health check", name)
		return
	}
	_, port, _ := net.SplitHostPort(addr)
	if s.Healthcheck == nil || len(s.Healthcheck.Test) == 0 {
		t.Errorf("service %s: no healthcheck", name)
		return
	}
	m := healthURL.FindStringSubmatch(s.Healthcheck.Test[len(s.Healthcheck.Test)-1])
	if m == nil || m[1] != port {
		t.Errorf("service %s: healthcheck %v, want http://127.0.0.1:%s/healthz (its --metrics-addr %s)", name, s.Healthcheck.Test, port, addr)
	}
}

func mustFlag(t *testing.T, c cmdline, name string) string {
	t.Helper()
	v, ok := flagValue(c.argv, name)
	if !ok {
		t.Fatalf("%s\n  has no --%s", c, name)
	}
	return v
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
