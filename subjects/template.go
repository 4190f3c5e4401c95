package subjects

import (
	"fmt"
	"strings"
)

// Template placeholders. Each is allowed only in its own position.
const (
	phVer      = "{ver}"
	phProtoVer = "{PROTOCOL_VERSION}"
	phProject  = "{project_id}"
	phChannel  = "{channel_id}"
)

// placeholderReason is the Reason of a TokenError for a placeholder found
// where it is not allowed.
const placeholderReason = "placeholder not allowed here ({ver} or {PROTOCOL_VERSION}, {project_id}, {channel_id} are allowed only in the ver, project_id and channel_id positions)"

// probeToken stands in for a placeholder while the rest of a template is
// validated as a subject. Any valid token works.
const probeToken = "x"

// Template is a subject template as written in CommonGround-style YAML tool
// definitions, e.g. "cg.{ver}.{project_id}.{channel_id}.cmd.tool.web_search".
// The ver position accepts "{ver}" or "{PROTOCOL_VERSION}", the project
// position "{project_id}" and the channel position "{channel_id}"; each of
// these positions may instead hold a concrete token. Everything else must be
// concrete and form a valid subject. The zero Template is invalid: Render
// fails, Matches reports false and Kind reports KindOther.
type Template struct {
	raw string
	// fixed holds the concrete ver, project and channel; "" marks a
	// placeholder.
	fixed [3]string
	// shape is the template parsed with placeholders replaced by probeToken.
	shape Subject
	ok    bool
}

// ParseTemplate parses and validates a subject template. Errors match
// ErrInvalidSubject, and ErrInvalidToken (with a *TokenError) when a single
// token is at fault, including a placeholder in the wrong position.
func ParseTemplate(s string) (Template, error) {
	t, err := parseTemplate(s)
	if err != nil {
		return Template{}, fmt.Errorf("%w: template %s: %w", ErrInvalidSubject, quoteShort(s), err)
	}
	return t, nil
}

func parseTemplate(s string) (Template, error) {
	t := Template{raw: s}
	if strings.Count(s, ".")+1 < minTokens {
		_, err := parse(s) // reports the token count
		return Template{}, err
	}
	// Split off cg, ver, project, channel; s has at least 6 dots.
	var head [4]string
	rest := s
	for i := range head {
		j := strings.IndexByte(rest, '.')
		head[i], rest = rest[:j], rest[j+1:]
	}
	probe := head
	for i := 1; i <= 3; i++ {
		tok := head[i]
		if isPlaceholderFor(i, tok) {
			probe[i] = probeToken
			continue
		}
		if isPlaceholder(tok) {
			return Template{}, &TokenError{Role: roleName(i, ""), Token: tok, Reason: placeholderReason}
		}
		t.fixed[i-1] = tok
	}
	shape, err := parse(probe[0] + "." + probe[1] + "." + probe[2] + "." + probe[3] + "." + rest)
	if err != nil {
		if te, ok := err.(*TokenError); ok && isPlaceholder(te.Token) {
			te.Reason = placeholderReason
		}
		return Template{}, err
	}
	t.shape = shape
	t.ok = true
	return t, nil
}

func isPlaceholderFor(pos int, tok string) bool {
	switch pos {
	case 1:
		return tok == phVer || tok == phProtoVer
	case 2:
		return tok == phProject
	case 3:
		return tok == phChannel
	}
	return false
}

func isPlaceholder(tok string) bool {
	return len(tok) >= 2 && tok[0] == '{' && tok[len(tok)-1] == '}'
}

// String returns the template exactly as parsed.
func (t Template) String() string { return t.raw }

// Render fills the placeholders and returns the validated subject. For a
// position the template fixes to a concrete value, the argument must be
// either "" or equal to that value (anything else is an error rather than
// a silent redirect to another project or channel).
func (t Template) Render(ver, project, channel string) (Subject, error) {
	if !t.ok {
		return Subject{}, fmt.Errorf("%w: zero Template", ErrInvalidSubject)
	}
	args := [3]string{ver, project, channel}
	for i, f := range t.fixed {
		if f == "" {
			continue
		}
		if args[i] != "" && args[i] != f {
			return Subject{}, fmt.Errorf("%w: template %s fixes %s to %q, got %q",
				ErrInvalidSubject, quoteShort(t.raw), roleName(i+1, ""), f, args[i])
		}
		args[i] = f
	}
	sub := t.shape
	sub.Version, sub.Project, sub.Channel = args[0], args[1], args[2]
	sub.Suffix = cloneSuffix(sub.Suffix)
	return build(sub)
}

// Kind returns the kind of the subjects the template renders to.
func (t Template) Kind() Kind {
	if !t.ok {
		return KindOther
	}
	return t.shape.Kind()
}

// Matches reports whether the template can render a subject for project and
// channel: a concrete project or channel in the template must be equal,
// a placeholder matches anything. The version is not considered.
func (t Template) Matches(project, channel string) bool {
	if !t.ok {
		return false
	}
	return (t.fixed[1] == "" || t.fixed[1] == project) &&
		(t.fixed[2] == "" || t.fixed[2] == channel)
}
