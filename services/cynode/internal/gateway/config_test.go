package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadConfig(t *testing.T) {
	for _, tc := range []struct {
		name, json, want string
	}{
		{"ok", `{"agents":{"a":{"type":"pm"}},"access_policies":"permit(principal, action, resource);"}`, ""},
		{"unknown field", `{"agent":{}}`, `unknown field "agent"`},
		{"bad agent type", `{"agents":{"a":{"type":"admin"}}}`, `agent "a" has type "admin"; use one of pm, pa, sandbox`},
		{"bad allowlist type", `{"allowlists":{"root":["*"]}}`, `agent type "root"`},
		{"model without provider", `{"models":[{"model_id":"m"}]}`, "models[0] needs model_id and provider"},
		{"model twice", `{"models":[{"model_id":"m","provider":"p"},{"model_id":"m","provider":"p"}]}`, `model "m" is listed twice`},
		{"not json", `agents: {}`, "invalid character"},
		{"web ok", `{"web":{"projects":{"p":{"domains":["example.org","*.example.org","*"],"schemes":["https"],"ports":[443]}},"search":{"url":"http://127.0.0.1:8888/search"}}}`, ""},
		{"web: no test switch in the file", `{"web":{"allow_loopback":true}}`, `unknown field "allow_loopback"`},
		{"web: too many redirects", `{"web":{"max_redirects":6}}`, "web.max_redirects is 6; use 1..5"},
		{"web: scheme", `{"web":{"projects":{"p":{"schemes":["ftp"],"domains":["a.org"]}}}}`, `web.projects.p.schemes has "ftp"; use http or https`},
		{"web: no domains", `{"web":{"projects":{"p":{}}}}`, "web.projects.p.domains is empty"},
		{"web: domain with a port", `{"web":{"projects":{"p":{"domains":["a.org:80"]}}}}`, `domains has "a.org:80"`},
		{"web: upper-case domain", `{"web":{"projects":{"p":{"domains":["A.org"]}}}}`, `domains has "A.org"`},
		{"web: port", `{"web":{"projects":{"p":{"domains":["a.org"],"ports":[0]}}}}`, "ports has 0"},
		{"api ok", `{"api":{"providers":{"wx":{"base_url":"https://api.example.com/v1","projects":["p"],"credential":{"header":"Authorization","prefix":"Bearer ","env":"WX"},"operations":{"get":{"method":"GET","path":"/a/{id}","params_schema":{"type":"object"}}}}}}}`, ""},
		{"api: base url with a password", `{"api":{"providers":{"wx":{"base_url":"https://u:p@api.example.com","operations":{"get":{"method":"GET","path":"/","params_schema":{}}}}}}}`, "api.providers.wx.base_url"},
		{"api: no operations", `{"api":{"providers":{"wx":{"base_url":"https://api.example.com"}}}}`, "api.providers.wx.operations is empty"},
		{"api: method", `{"api":{"providers":{"wx":{"base_url":"https://a.example","operations":{"get":{"method":"TRACE","path":"/","params_schema":{}}}}}}}`, `method "TRACE"`},
		{"api: path climbs", `{"api":{"providers":{"wx":{"base_url":"https://a.example","operations":{"get":{"method":"GET","path":"/../admin","params_schema":{}}}}}}}`, `path "/../admin"`},
		{"api: no params schema", `{"api":{"providers":{"wx":{"base_url":"https://a.example","operations":{"get":{"method":"GET","path":"/"}}}}}}`, "params_schema is missing"},
		{"api: credential in two places", `{"api":{"providers":{"wx":{"base_url":"https://a.example","credential":{"header":"X","env":"A","file":"f"},"operations":{"get":{"method":"GET","path":"/","params_schema":{}}}}}}}`, "exactly one of env or file"},
		{"web: search url", `{"web":{"search":{"url":"file:///x"}}}`, `web.search.url "file:///x" is not an http(s) URL`},
		{"git: forge ok", `{"git":{"repos":{"app":{"path":"/srv/app.git","project":"p","provider":"gitea","forge":{"api_url":"https://gitea.example.org/api/v1","owner":"acme","repo":"app","credential":{"env":"GITEA_TOKEN"}}}}}}`, ""},
		{"git: unknown provider", `{"git":{"repos":{"app":{"path":"/srv/app.git","project":"p","provider":"gitlab"}}}}`, `provider "gitlab": use local, github or gitea`},
		{"git: forge missing", `{"git":{"repos":{"app":{"path":"/srv/app.git","project":"p","provider":"github"}}}}`, "git.repos.app.forge is missing"},
		{"git: forge on local", `{"git":{"repos":{"app":{"path":"/srv/app.git","project":"p","forge":{"api_url":"https://api.github.com","owner":"a","repo":"b","credential":{"env":"T"}}}}}}`, "provider is local"},
		{"git: forge url with a password", `{"git":{"repos":{"app":{"path":"/srv/app.git","project":"p","provider":"github","forge":{"api_url":"https://u:p@api.github.com","owner":"a","repo":"b","credential":{"env":"T"}}}}}}`, "forge.api_url"},
		{"git: forge owner", `{"git":{"repos":{"app":{"path":"/srv/app.git","project":"p","provider":"github","forge":{"api_url":"https://api.github.com","owner":"a/../b","repo":"b","credential":{"env":"T"}}}}}}`, "must be the forge's names"},
		{"git: forge token twice", `{"git":{"repos":{"app":{"path":"/srv/app.git","project":"p","provider":"github","forge":{"api_url":"https://api.github.com","owner":"a","repo":"b","credential":{"env":"T","file":"t"}}}}}}`, "exactly one of env or file"},
		{"sandbox: cgroup relative", `{"sandbox":{"cgroup":"cynode"}}`, `sandbox.cgroup "cynode"`},
		{"sandbox: empty image", `{"sandbox":{"images":[""]}}`, "sandbox.images[0] is empty"},
	} {
		path := filepath.Join(t.TempDir(), "cynode.json")
		if err := os.WriteFile(path, []byte(tc.json), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadConfig(path)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v; want %q", tc.name, err, tc.want)
		}
	}
}

func TestScopeAndAllowlists(t *testing.T) {
	for _, tc := range []struct {
		scope Scope
		t     AgentType
		want  bool
	}{
		{ScopeBoth, Sandbox, true}, {ScopeBoth, PA, true}, {ScopeSandbox, Sandbox, true}, {ScopeSandbox, PM, false},
		{ScopePM, Sandbox, false}, {ScopePM, PA, true}, {ScopePM, PM, true},
	} {
		if got := tc.scope.Admits(tc.t); got != tc.want {
			t.Errorf("%s admits %s = %v", tc.scope, tc.t, got)
		}
	}
	for _, tool := range []string{"db.task.get", "node.list", "model.list", "sandbox.create", "skills.create"} {
		if Allows(DefaultAllowlists[Sandbox], tool) {
			t.Errorf("the sandbox allowlist admits %s", tool)
		}
	}
	if !Allows([]string{"artifact.*"}, "artifact.put") || Allows([]string{"artifact.*"}, "artifacts.put") {
		t.Error("prefix pattern")
	}
}
