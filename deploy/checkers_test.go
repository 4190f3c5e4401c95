package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckersCatchMistakes shows that the command-line checks fail on
// the mistakes they exist for, and pass the same lines without them.
func TestCheckersCatchMistakes(t *testing.T) {
	root := t.TempDir()
	copyTree(t, shared(t), filepath.Join(root, "/shared"), false)
	if err := os.MkdirAll(filepath.Join(root, "/data"), 0o700); err != nil {
		t.Fatal(err)
	}
	node := "up --data /data --nats-listen 0.0.0.0:4222 --metrics-addr 0.0.0.0:9464 --ui-listen= --cluster-name c --server-name n1 " +
		"--routes nats-route://n1:6222,nats-route://n2:6222,nats-route://n3:6222 --cluster-secret-file /shared/route-secret " +
		"--creds-dir /shared/creds --keys-dir /shared/keys"
	tasks := "worker --nats nats://n1:4222 --creds /shared/creds/worker-atlas_tasks.nk --atlas-state jetstream --atlas-state-replicas 3 atlas.tasks"
	for _, tc := range []struct {
		name, line string
		// want: a substring of the problem; "" means no problem.
		want string
	}{
		{"node", node, ""},
		{"tasks worker", tasks, ""},
		{"atp worker", "worker --nats nats://n1:4222 --creds /shared/creds/admin.nk --data /data atp", ""},
		{"unknown flag", node + " --cluster-nme c", "unknown flag --cluster-nme; did you mean --cluster-name?"},
		{"bad value", tasks + " --concurrency many", "--concurrency"},
		{"unknown service", strings.Replace(tasks, "atlas.tasks", "atlas.task", 1), `unknown tool service "atlas.task"`},
		{"state files in a cluster", node + " --state files", "--state files with --cluster-name"},
		{"cluster without routes", "up --data /data --cluster-name c --server-name n1", "--cluster-name needs --routes"},
		{"missing secret file", strings.Replace(node, "/shared/route-secret", "/shared/no-secret", 1), "--cluster-secret-file"},
		{"bad replicas", node + " --replicas 9", "--replicas 9"},
		{"bad atlas state", strings.Replace(tasks, "--atlas-state jetstream", "--atlas-state jetstreem", 1), `--atlas-state "jetstreem"`},
		{"creds init does not make", strings.Replace(tasks, "worker-atlas_tasks.nk", "worker-atlas.tasks.nk", 1), "utpmesh-init makes no such file"},
		{"keys dir without keys", strings.Replace(node, "--keys-dir /shared/keys", "--keys-dir /shared/creds", 1), "has no demo.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cmdline{src: tc.name, argv: strings.Fields(tc.line)}
			problems := parseProblems(t, c)
			if len(problems) == 0 {
				problems = startProblems(t, root, c)
			}
			got := strings.Join(problems, "\n")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("want no problem, got:\n%s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("want a problem containing %q, got:\n%s", tc.want, got)
			}
		})
	}
}
