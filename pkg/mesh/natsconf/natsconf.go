// Package natsconf renders the mesh's roles as the users of a NATS
// deployment the mesh joins (`utpmesh up --nats`, docs/cluster.md): the
// accounts block of a nats-server configuration file, nsc commands, and
// the permissions of a user JWT. The permissions come from the caller
// (internal/meshauth.Permissions), so the rendering never drifts from
// what an embedded mesh enforces.
package natsconf

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// ErrUser: a user cannot be rendered (no name, or a key that is not a
// public user nkey); the message says which.
var ErrUser = errors.New("natsconf: user")

// User is one NATS user of the mesh's account.
type User struct {
	// Name is the identity's name (core, admin, agent-<project>,
	// worker-<service>).
	Name string
	// Nkey is the user's public nkey (U…); empty renders a placeholder
	// the operator replaces.
	Nkey string
	// Permissions are what the user may publish and subscribe to; nil
	// means every subject of the account (core, admin).
	Permissions *server.Permissions
	// Comment says what the role is for (one line; optional).
	Comment string
}

func (u User) check() error {
	if strings.TrimSpace(u.Name) == "" {
		return fmt.Errorf("%w: empty name", ErrUser)
	}
	if u.Nkey != "" && !nkeys.IsValidPublicUserKey(u.Nkey) {
		return fmt.Errorf("%w: %s: %q is not a public user nkey (U…)", ErrUser, u.Name, u.Nkey)
	}
	return nil
}

// Placeholder is what Conf writes for a user without Nkey.
func Placeholder(name string) string {
	return "PUBLIC_NKEY_OF_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(name))
}

// Conf writes an accounts block of a nats-server configuration file: the
// account with JetStream enabled and one nkey user per entry of users,
// with its permissions.
func Conf(w io.Writer, account string, users []User) error {
	var b strings.Builder
	fmt.Fprintf(&b, "accounts {\n  %s {\n    jetstream: enabled\n    users: [\n", strconv.Quote(account))
	for _, u := range users {
		if err := u.check(); err != nil {
			return err
		}
		key := u.Nkey
		if key == "" {
			key = Placeholder(u.Name)
		}
		if u.Comment != "" {
			fmt.Fprintf(&b, "      # %s: %s\n", u.Name, u.Comment)
		}
		fmt.Fprintf(&b, "      {\n        nkey: %s\n", strconv.Quote(key))
		if p := u.Permissions; p != nil {
			b.WriteString("        permissions: {\n")
			confList(&b, "publish", p.Publish)
			confList(&b, "subscribe", p.Subscribe)
			if r := p.Response; r != nil {
				fmt.Fprintf(&b, "          allow_responses: {max: %d, expires: %s}\n", r.MaxMsgs, strconv.Quote(r.Expires.String()))
			}
			b.WriteString("        }\n")
		}
		b.WriteString("      }\n")
	}
	b.WriteString("    ]\n  }\n}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func confList(b *strings.Builder, what string, p *server.SubjectPermission) {
	if p == nil {
		return
	}
	fmt.Fprintf(b, "          %s: {\n", what)
	for _, l := range []struct {
		name string
		subs []string
	}{{"allow", p.Allow}, {"deny", p.Deny}} {
		if len(l.subs) == 0 {
			continue
		}
		fmt.Fprintf(b, "            %s: [\n", l.name)
		for _, s := range l.subs {
			fmt.Fprintf(b, "              %s\n", strconv.Quote(s))
		}
		b.WriteString("            ]\n")
	}
	b.WriteString("          }\n")
}

// NSC writes the nsc commands that make the account (JetStream enabled)
// and each user with its permissions, and their .creds files.
func NSC(w io.Writer, account string, users []User) error {
	var b strings.Builder
	q := shellQuote
	fmt.Fprintf(&b, "nsc add account --name %s\n", q(account))
	fmt.Fprintf(&b, "nsc edit account --name %s --js-disk-storage -1 --js-mem-storage -1 --js-streams -1 --js-consumer -1\n", q(account))
	for _, u := range users {
		if err := u.check(); err != nil {
			return err
		}
		if u.Comment != "" {
			fmt.Fprintf(&b, "# %s: %s\n", u.Name, u.Comment)
		}
		fmt.Fprintf(&b, "nsc add user --account %s --name %s", q(account), q(u.Name))
		if p := u.Permissions; p != nil {
			for _, l := range []struct {
				flag string
				sp   *server.SubjectPermission
				deny bool
			}{{"--allow-pub", p.Publish, false}, {"--deny-pub", p.Publish, true}, {"--allow-sub", p.Subscribe, false}, {"--deny-sub", p.Subscribe, true}} {
				if l.sp == nil {
					continue
				}
				subs := l.sp.Allow
				if l.deny {
					subs = l.sp.Deny
				}
				for _, s := range subs {
					fmt.Fprintf(&b, " \\\n  %s %s", l.flag, q(s))
				}
			}
			if r := p.Response; r != nil {
				fmt.Fprintf(&b, " \\\n  --allow-pub-response=%d --response-ttl %s", r.MaxMsgs, r.Expires)
			}
		}
		b.WriteString("\n")
		fmt.Fprintf(&b, "nsc generate creds --account %s --name %s > %s\n", q(account), q(u.Name), q(u.Name+".creds"))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// shellQuote quotes s for sh when it holds more than letters, digits and
// -_.=/:.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.=/:") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// JWTPermissions are p as the permissions of a user JWT (nil p: none,
// every subject of the account).
func JWTPermissions(p *server.Permissions) jwt.Permissions {
	var out jwt.Permissions
	if p == nil {
		return out
	}
	if p.Publish != nil {
		out.Pub = jwt.Permission{Allow: p.Publish.Allow, Deny: p.Publish.Deny}
	}
	if p.Subscribe != nil {
		out.Sub = jwt.Permission{Allow: p.Subscribe.Allow, Deny: p.Subscribe.Deny}
	}
	if r := p.Response; r != nil {
		out.Resp = &jwt.ResponsePermission{MaxMsgs: r.MaxMsgs, Expires: r.Expires}
	}
	return out
}

// UserClaims are the claims of u's user JWT with its permissions; the
// account's key signs them (claims.Encode).
func UserClaims(u User) (*jwt.UserClaims, error) {
	if err := u.check(); err != nil {
		return nil, err
	}
	if u.Nkey == "" {
		return nil, fmt.Errorf("%w: %s: a user JWT needs the user's public nkey", ErrUser, u.Name)
	}
	c := jwt.NewUserClaims(u.Nkey)
	c.Name = u.Name
	c.Permissions = JWTPermissions(u.Permissions)
	return c, nil
}
