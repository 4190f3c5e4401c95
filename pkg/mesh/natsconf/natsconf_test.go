package natsconf_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/utpmesh/utpmesh/pkg/mesh/natsconf"
)

func pub(t *testing.T) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	p, _ := kp.PublicKey()
	return p
}

var limited = &server.Permissions{
	Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.INFO", "cg.v.*.*.svc.x"}, Deny: []string{"cg.v.*.*.svc.x.y"}},
	Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
	Response:  &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute},
}

// TestConfParses: the accounts block Conf writes is a configuration
// nats-server accepts, with each user's permissions as given.
func TestConfParses(t *testing.T) {
	core, worker := pub(t), pub(t)
	var b strings.Builder
	if err := natsconf.Conf(&b, "MESH", []natsconf.User{{Name: "core", Nkey: core, Comment: "everything"}, {Name: "worker-x", Nkey: worker, Permissions: limited}}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "n.conf")
	if err := os.WriteFile(path, []byte("jetstream { store_dir: \""+t.TempDir()+"\" }\n"+b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server refuses the configuration: %v\n%s", err, b.String())
	}
	got := map[string]*server.NkeyUser{}
	for _, u := range opts.Nkeys {
		got[u.Nkey] = u
	}
	if u := got[core]; u == nil || u.Permissions != nil || u.Account == nil || u.Account.Name != "MESH" {
		t.Fatalf("core user = %+v; want account MESH, no permissions", u)
	}
	w := got[worker]
	if w == nil || w.Permissions == nil {
		t.Fatalf("worker user = %+v", w)
	}
	p := w.Permissions
	if strings.Join(p.Publish.Allow, " ") != "$JS.API.INFO cg.v.*.*.svc.x" || strings.Join(p.Publish.Deny, " ") != "cg.v.*.*.svc.x.y" ||
		strings.Join(p.Subscribe.Allow, " ") != "_INBOX.>" || p.Response == nil || p.Response.MaxMsgs != 1 || p.Response.Expires != time.Minute {
		t.Fatalf("worker permissions = %+v %+v %+v %+v", p.Publish, p.Subscribe, p.Response, b.String())
	}
}

func TestRefused(t *testing.T) {
	tests := []struct {
		name string
		u    natsconf.User
		want string
	}{
		{"no name", natsconf.User{}, "empty name"},
		{"not a user key", natsconf.User{Name: "core", Nkey: "SUAAAA"}, "not a public user nkey"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, f := range []func() error{
				func() error { return natsconf.Conf(&strings.Builder{}, "MESH", []natsconf.User{tc.u}) },
				func() error { return natsconf.NSC(&strings.Builder{}, "MESH", []natsconf.User{tc.u}) },
				func() error { _, err := natsconf.UserClaims(tc.u); return err },
			} {
				if err := f(); !errors.Is(err, natsconf.ErrUser) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("= %v, want ErrUser containing %q", err, tc.want)
				}
			}
		})
	}
	if _, err := natsconf.UserClaims(natsconf.User{Name: "core"}); !errors.Is(err, natsconf.ErrUser) {
		t.Errorf("UserClaims without a key = %v, want ErrUser", err)
	}
}

func TestNSCAndJWT(t *testing.T) {
	var b strings.Builder
	if err := natsconf.NSC(&b, "MESH", []natsconf.User{{Name: "worker-x", Permissions: limited}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"nsc add account --name MESH", "nsc add user --account MESH --name worker-x",
		"--allow-pub '$JS.API.INFO'", "--deny-pub 'cg.v.*.*.svc.x.y'", "--allow-sub '_INBOX.>'", "--allow-pub-response=1 --response-ttl 1m0s",
		"nsc generate creds --account MESH --name worker-x > worker-x.creds"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("nsc output lacks %q:\n%s", want, b.String())
		}
	}
	key := pub(t)
	c, err := natsconf.UserClaims(natsconf.User{Name: "worker-x", Nkey: key, Permissions: limited})
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject != key || c.Name != "worker-x" || len(c.Pub.Allow) != 2 || c.Resp == nil || c.Resp.MaxMsgs != 1 {
		t.Fatalf("claims = %+v", c)
	}
	if p := natsconf.JWTPermissions(nil); len(p.Pub.Allow) != 0 || p.Resp != nil {
		t.Fatalf("JWTPermissions(nil) = %+v, want none", p)
	}
}
