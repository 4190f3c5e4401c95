package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDockerfile checks the image recipe against the repository: the Go
// version of go.mod, sources that exist, a non-root user, /data a volume,
// utpmesh the entrypoint, a default command the CLI accepts, and the
// ports the other deployments use exposed.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	var froms []string
	final := map[string][]string{} // instruction → arguments, final stage
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, args, _ := strings.Cut(line, " ")
		instr = strings.ToUpper(instr)
		if instr == "FROM" {
			froms = append(froms, args)
			final = map[string][]string{}
		}
		final[instr] = append(final[instr], strings.TrimSpace(args))
		if instr == "COPY" && !strings.Contains(args, "--from=") {
			f := strings.Fields(args)
			for _, src := range f[:len(f)-1] {
				if !fileExists(filepath.Join("..", src)) {
					t.Errorf("Dockerfile: COPY %s: no such file in the repository", src)
				}
			}
		}
	}
	if len(froms) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a build stage and a runtime stage", len(froms))
	}
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(gomod))
	if m == nil || !strings.HasPrefix(froms[0], "golang:"+m[1]) {
		t.Errorf("Dockerfile: build stage FROM %s, want golang:%s (go.mod)", froms[0], m[1])
	}
	if main, _ := os.ReadFile("../cmd/utpmesh/main.go"); !strings.Contains(text, "-X main.Version=") || !strings.Contains(string(main), "var Version") {
		t.Errorf("Dockerfile: the version is set with -X main.Version, which cmd/utpmesh must declare")
	}
	if u := last(final["USER"]); u == "" || u == "root" || strings.HasPrefix(u, "0") {
		t.Errorf("Dockerfile: runtime USER %q, want a non-root user", u)
	}
	if !strings.Contains(last(final["VOLUME"]), `"/data"`) {
		t.Errorf("Dockerfile: want VOLUME [\"/data\"], got %q", last(final["VOLUME"]))
	}
	var entry, cmd []string
	if err := json.Unmarshal([]byte(last(final["ENTRYPOINT"])), &entry); err != nil || !slices.Equal(entry, []string{"utpmesh"}) {
		t.Errorf("Dockerfile: ENTRYPOINT %q, want [\"utpmesh\"] (compose and k8s pass utpmesh arguments)", last(final["ENTRYPOINT"]))
	}
	if err := json.Unmarshal([]byte(last(final["CMD"])), &cmd); err != nil || len(cmd) == 0 {
		t.Fatalf("Dockerfile: CMD %q: want a JSON array", last(final["CMD"]))
	}
	checkParses(t, cmdline{src: "Dockerfile CMD", argv: cmd})
	exposed := strings.Fields(strings.Join(final["EXPOSE"], " "))
	for _, p := range []string{"4222", "6222", "9464", "9465"} {
		if !slices.Contains(exposed, p) {
			t.Errorf("Dockerfile: EXPOSE %v lacks %s", exposed, p)
		}
	}
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}
