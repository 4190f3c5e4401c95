package deploy

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// unit is a parsed systemd unit file: section → key → values (in order).
type unit map[string]map[string][]string

func loadUnit(t *testing.T, path string) unit {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{}
	section := ""
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s: not a key=value line in a section: %q", path, line)
			}
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return u
}

func (u unit) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// loadEnv reads a systemd EnvironmentFile (KEY=VALUE lines).
func loadEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: not KEY=VALUE: %q", path, line)
		}
		env[k] = v
	}
	return env
}

var envRef = regexp.MustCompile(`^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$`)

// expandExec expands an ExecStart line as systemd does: %i is the
// instance; a word ${VAR} becomes exactly one argument (empty when unset),
// a word $VAR zero or more (split at whitespace).
func expandExec(t *testing.T, line, instance string, env map[string]string) []string {
	t.Helper()
	line = strings.ReplaceAll(line, "%i", instance)
	words, err := shellWords(line)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, w := range words {
		m := envRef.FindStringSubmatch(w.text)
		switch {
		case m == nil:
			if strings.Contains(w.text, "$") {
				t.Fatalf("ExecStart word %q: use ${VAR} or $VAR as a whole word", w.text)
			}
			out = append(out, w.text)
		case strings.HasPrefix(w.text, "${"):
			out = append(out, env[m[1]])
		default:
			out = append(out, strings.Fields(env[m[1]])...)
		}
	}
	return out
}

// unitCommand is the utpmesh command line of a unit's ExecStart.
func unitCommand(t *testing.T, src string, u unit, instance string, env map[string]string) cmdline {
	t.Helper()
	argv := expandExec(t, u.get("Service", "ExecStart"), instance, env)
	if len(argv) < 2 || argv[0] != "/usr/local/bin/utpmesh" {
		t.Fatalf("%s: ExecStart %v, want /usr/local/bin/utpmesh ...", src, argv)
	}
	return cmdline{src: src, argv: argv[1:], env: env}
}

// TestSystemdUnits checks the units' hardening and stop handling, runs the
// CLI over their command lines with each example environment file
// (every node, every worker instance) and checks the three nodes form one
// cluster.
func TestSystemdUnits(t *testing.T) {
	root := t.TempDir()
	copyTree(t, shared(t), filepath.Join(root, "/etc/utpmesh/shared"), false)
	up := loadUnit(t, "systemd/utpmesh-up.service")
	worker := loadUnit(t, "systemd/utpmesh-worker@.service")
	for name, u := range map[string]unit{"utpmesh-up.service": up, "utpmesh-worker@.service": worker} {
		for key, want := range map[string]string{"NoNewPrivileges": "yes", "ProtectSystem": "strict", "KillSignal": "SIGTERM",
			"ProtectHome": "yes", "PrivateTmp": "yes", "User": "utpmesh", "Restart": "on-failure"} {
			if got := u.get("Service", key); got != want {
				t.Errorf("%s: %s=%q, want %q", name, key, got, want)
			}
		}
		if len(u["Service"]["ReadWritePaths"]) == 0 || u.get("Service", "StateDirectory") == "" {
			t.Errorf("%s: want StateDirectory= and ReadWritePaths= (ProtectSystem=strict makes everything else read-only)", name)
		}
		// Stop: drain (--drain-timeout) plus 10 s for the inbox and stores.
		stop, err := strconv.Atoi(u.get("Service", "TimeoutStopSec"))
		if err != nil {
			t.Errorf("%s: TimeoutStopSec=%q: want seconds", name, u.get("Service", "TimeoutStopSec"))
		}
		c := unitCommand(t, name, u, "echo", map[string]string{})
		drain, _ := flagValue(c.argv, "drain-timeout")
		d, err := time.ParseDuration(drain)
		if err != nil {
			t.Errorf("%s: --drain-timeout %q: %v", name, drain, err)
		}
		if time.Duration(stop)*time.Second <= d+10*time.Second {
			t.Errorf("%s: TimeoutStopSec=%d is not above --drain-timeout %v + 10 s", name, stop, d)
		}
		rw := strings.ReplaceAll(strings.Join(u["Service"]["ReadWritePaths"], " "), "%i", "echo")
		if data, _ := flagValue(c.argv, "data"); !pathUnder(data, []string{rw}) {
			t.Errorf("%s: --data %s is not under ReadWritePaths %v", name, data, u["Service"]["ReadWritePaths"])
		}
	}

	// Every node's environment file: one cluster.
	nodes, _ := filepath.Glob("systemd/env/n*.env")
	if len(nodes) != 3 {
		t.Fatalf("systemd/env: %d node files %v, want 3", len(nodes), nodes)
	}
	names := map[string]bool{}
	var routes []string
	for _, f := range nodes {
		env := loadEnv(t, f)
		c := unitCommand(t, "utpmesh-up.service with "+f, up, "", env)
		t.Run(filepath.Base(f), func(t *testing.T) {
			checkParses(t, c)
			checkStarts(t, root, c)
		})
		name := env["UTPMESH_SERVER_NAME"]
		if names[name] {
			t.Errorf("%s: server name %q used twice", f, name)
		}
		names[name] = true
		routes = append(routes, env["UTPMESH_ROUTES"])
		if !strings.Contains(env["UTPMESH_ROUTES"], "nats-route://"+name+":") {
			t.Errorf("%s: --routes %s does not name this node %s", f, env["UTPMESH_ROUTES"], name)
		}
	}
	for _, r := range routes[1:] {
		if r != routes[0] {
			t.Errorf("the nodes' UTPMESH_ROUTES differ: %q and %q", routes[0], r)
		}
	}

	// Every worker instance that has an environment file.
	common := loadEnv(t, "systemd/env/worker.env")
	files, _ := filepath.Glob("systemd/env/worker-*.env")
	if len(files) == 0 {
		t.Fatal("systemd/env: no worker-<service>.env")
	}
	for _, f := range files {
		inst := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "worker-"), ".env")
		env := map[string]string{}
		for k, v := range common {
			env[k] = v
		}
		for k, v := range loadEnv(t, f) {
			env[k] = v
		}
		c := unitCommand(t, "utpmesh-worker@"+inst+".service", worker, inst, env)
		t.Run(inst, func(t *testing.T) {
			checkParses(t, c)
			checkStarts(t, root, c)
		})
	}
}

// TestSystemdAnalyzeVerify runs systemd-analyze verify over the units
// (with ExecStart pointed at the built binary, which it checks exists);
// any warning fails.
func TestSystemdAnalyzeVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the units are checked by TestSystemdUnits only")
	}
	dir := t.TempDir()
	for _, f := range []struct{ src, dst string }{
		{"systemd/utpmesh-up.service", "utpmesh-up.service"},
		{"systemd/utpmesh-worker@.service", "utpmesh-worker@.service"},
	} {
		b, err := os.ReadFile(f.src)
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.ReplaceAll(b, []byte("/usr/local/bin/utpmesh"), []byte(cliBin))
		if err := os.WriteFile(filepath.Join(dir, f.dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []string{"utpmesh-up.service", "utpmesh-worker@atlas.tasks.service", "utpmesh-worker@atp.service"} {
		cmd := exec.Command(sa, "verify", filepath.Join(dir, u))
		out, err := cmd.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, out)
		}
	}
}

// pathUnder reports whether p is one of dirs or below one.
func pathUnder(p string, dirs []string) bool {
	for _, d := range dirs {
		for _, dd := range strings.Fields(d) {
			if p == dd || strings.HasPrefix(p, strings.TrimSuffix(dd, "/")+"/") {
				return true
			}
		}
	}
	return false
}
