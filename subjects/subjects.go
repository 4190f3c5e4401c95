package subjects

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// DefaultVersion is the protocol version token used by this release of the
// mesh. It occupies the second token of every subject ("cg.v1r3.…").
const DefaultVersion = "v1r3"

// MaxTokenLen is the maximum length, in bytes, of any single subject token.
const MaxTokenLen = 128

// Prefix is not exported as a constant on purpose: the first token of every
// subject is literally "cg" and is not configurable.
const prefix = "cg"

// minTokens is the number of tokens in a subject without suffix:
// cg, ver, project, channel, category, component, target.
const minTokens = 7

// Category is the fifth token of a subject. It selects the transport
// semantics: JetStream for Cmd and Evt, core NATS for Str and Svc.
type Category string

// The four categories of the UTP subject grammar.
const (
	// Cmd is a command, persisted in the JetStream command stream ("cmd.>").
	Cmd Category = "cmd"
	// Evt is an event, persisted in the JetStream event stream ("evt.>").
	Evt Category = "evt"
	// Str is a core NATS stream of ephemeral messages (e.g. token streaming).
	Str Category = "str"
	// Svc is a core NATS request-reply service of the mesh itself
	// (CardStore, registry, inbox…). It is deliberately not under "cmd"
	// so the JetStream command stream never captures service requests.
	Svc Category = "svc"
)

// Component is the sixth token of a cmd, evt or str subject. For svc
// subjects the sixth token is the service name, which is stored in the
// Component field as an arbitrary token (see Subject).
type Component string

// The four components allowed in cmd, evt and str subjects.
const (
	// Agent addresses an agent.
	Agent Component = "agent"
	// Sys addresses the mesh system (PMO, inbox, dead letters…).
	Sys Component = "sys"
	// User addresses a human user.
	User Component = "user"
	// Tool addresses a tool worker.
	Tool Component = "tool"
)

// Sentinel errors. Every error returned by this package matches at least one
// of them with errors.Is.
var (
	// ErrInvalidToken is matched by every *TokenError: a single token is
	// empty, too long, contains a forbidden character, or has a value not
	// allowed in its position (wrong prefix, unknown category or component,
	// misplaced template placeholder).
	ErrInvalidToken = errors.New("subjects: invalid token")

	// ErrInvalidSubject is matched by every error about a whole subject or
	// template (Parse, Validate, builders, ParseTemplate, Render). When the
	// cause is a single bad token the error also matches ErrInvalidToken and
	// errors.As finds the *TokenError.
	ErrInvalidSubject = errors.New("subjects: invalid subject")
)

// TokenError describes one invalid token. Role names the position of the
// token ("prefix", "ver", "project_id", "channel_id", "category",
// "component", "target", "suffix[N]", "service", "op", or a role passed to
// ValidateToken); Token is the offending token, verbatim; Reason says why it
// is invalid ("empty", "too long (…)", "invalid character 'x' at byte N", …).
type TokenError struct {
	Role   string
	Token  string
	Reason string
}

// Error implements error.
func (e *TokenError) Error() string {
	return "invalid " + e.Role + " " + quoteShort(e.Token) + ": " + e.Reason
}

// Unwrap returns ErrInvalidToken.
func (e *TokenError) Unwrap() error { return ErrInvalidToken }

// quoteShort quotes s for an error message, truncating long inputs.
func quoteShort(s string) string {
	const max = 48
	if len(s) <= max {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:max]) + "…"
}

// tokenChar reports which bytes may appear in a token: [A-Za-z0-9_-].
var tokenChar = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	t['_'] = true
	t['-'] = true
	return t
}()

// ValidateToken checks one token against the token rules: non-empty, at
// most MaxTokenLen bytes, characters [A-Za-z0-9_-] only. role is used in
// the returned *TokenError to say which token is wrong.
func ValidateToken(role, tok string) error {
	if e := checkToken(role, tok); e != nil {
		return e
	}
	return nil
}

// checkToken is ValidateToken returning the concrete type.
func checkToken(role, tok string) *TokenError {
	if tok == "" {
		return &TokenError{Role: role, Token: tok, Reason: "empty"}
	}
	for i := 0; i < len(tok); i++ {
		if !tokenChar[tok[i]] {
			return badChar(role, tok, i)
		}
	}
	if len(tok) > MaxTokenLen {
		return tooLong(role, tok)
	}
	return nil
}

func tooLong(role, tok string) *TokenError {
	return &TokenError{Role: role, Token: tok,
		Reason: fmt.Sprintf("too long (%d bytes, max %d)", len(tok), MaxTokenLen)}
}

func badChar(role, tok string, i int) *TokenError {
	var ch string
	if r, size := utf8.DecodeRuneInString(tok[i:]); r == utf8.RuneError && size <= 1 {
		ch = fmt.Sprintf(`'\x%02x'`, tok[i])
	} else {
		ch = strconv.QuoteRune(r)
	}
	return &TokenError{Role: role, Token: tok,
		Reason: fmt.Sprintf("invalid character %s at byte %d", ch, i)}
}

// Subject is a parsed UTP subject
//
//	cg.<Version>.<Project>.<Channel>.<Category>.<Component>.<Target>[.<Suffix>…]
//
// For Category Svc the Component field holds the service name and Target
// holds the operation; Suffix must be empty. A Subject without suffix has a
// nil Suffix after Parse.
type Subject struct {
	Version   string
	Project   string
	Channel   string
	Category  Category
	Component Component
	Target    string
	Suffix    []string
}

// roleName returns the role of token i of a subject with category cat.
func roleName(i int, cat Category) string {
	switch i {
	case 0:
		return "prefix"
	case 1:
		return "ver"
	case 2:
		return "project_id"
	case 3:
		return "channel_id"
	case 4:
		return "category"
	case 5:
		if cat == Svc {
			return "service"
		}
		return "component"
	case 6:
		if cat == Svc {
			return "op"
		}
		return "target"
	}
	return "suffix[" + strconv.Itoa(i-minTokens) + "]"
}

func checkCategory(tok string) *TokenError {
	switch Category(tok) {
	case Cmd, Evt, Str, Svc:
		return nil
	}
	if e := checkToken("category", tok); e != nil {
		return e
	}
	return &TokenError{Role: "category", Token: tok, Reason: "unknown category (want cmd, evt, str or svc)"}
}

func checkComponent(cat Category, tok string) *TokenError {
	if cat == Svc {
		return checkToken("service", tok)
	}
	switch Component(tok) {
	case Agent, Sys, User, Tool:
		return nil
	}
	if e := checkToken("component", tok); e != nil {
		return e
	}
	return &TokenError{Role: "component", Token: tok, Reason: "unknown component (want agent, sys, user or tool)"}
}

func checkPrefix(tok string) *TokenError {
	if tok == prefix {
		return nil
	}
	if e := checkToken("prefix", tok); e != nil {
		return e
	}
	return &TokenError{Role: "prefix", Token: tok, Reason: `must be "cg"`}
}

// Parse parses and fully validates a concrete subject. It never panics.
// Wildcards ("*", ">") are not valid in a concrete subject. Errors match
// ErrInvalidSubject, and also ErrInvalidToken (with a *TokenError available
// through errors.As) when a single token is at fault.
func Parse(s string) (Subject, error) {
	sub, err := parse(s)
	if err != nil {
		return Subject{}, fmt.Errorf("%w %s: %w", ErrInvalidSubject, quoteShort(s), err)
	}
	return sub, nil
}

// parse is Parse without the subject context in the error. It scans s once
// (plus a strings.Count) and does not allocate unless there is a suffix.
func parse(s string) (Subject, error) {
	n := strings.Count(s, ".") + 1
	if n < minTokens {
		return Subject{}, fmt.Errorf("%d tokens, want at least %d (cg.<ver>.<project_id>.<channel_id>.<category>.<component>.<target>)", n, minTokens)
	}
	var sub Subject
	if n > minTokens {
		sub.Suffix = make([]string, 0, n-minTokens)
	}
	idx, start := 0, 0
	for start <= len(s) {
		// Scan one token; '.' is not a token character, so the loop stops
		// at the separator, the end, or the first invalid byte.
		i := start
		for i < len(s) && tokenChar[s[i]] {
			i++
		}
		if i < len(s) && s[i] != '.' {
			end := strings.IndexByte(s[i:], '.')
			if end < 0 {
				end = len(s)
			} else {
				end += i
			}
			return Subject{}, badChar(roleName(idx, sub.Category), s[start:end], i-start)
		}
		tok := s[start:i]
		if tok == "" {
			return Subject{}, &TokenError{Role: roleName(idx, sub.Category), Token: tok, Reason: "empty"}
		}
		if len(tok) > MaxTokenLen {
			return Subject{}, tooLong(roleName(idx, sub.Category), tok)
		}
		switch idx {
		case 0:
			if e := checkPrefix(tok); e != nil {
				return Subject{}, e
			}
		case 1:
			sub.Version = tok
		case 2:
			sub.Project = tok
		case 3:
			sub.Channel = tok
		case 4:
			if e := checkCategory(tok); e != nil {
				return Subject{}, e
			}
			sub.Category = Category(tok)
			if sub.Category == Svc && n != minTokens {
				return Subject{}, fmt.Errorf("svc subject has %d tokens, want exactly %d (cg.<ver>.<project_id>.<channel_id>.svc.<service>.<op>, no suffix)", n, minTokens)
			}
		case 5:
			if e := checkComponent(sub.Category, tok); e != nil {
				return Subject{}, e
			}
			sub.Component = Component(tok)
		case 6:
			sub.Target = tok
		default:
			sub.Suffix = append(sub.Suffix, tok)
		}
		idx++
		start = i + 1
	}
	return sub, nil
}

// String returns the canonical dotted form of s. For a valid Subject,
// Parse(s.String()) returns a Subject equal to s (with nil Suffix when s
// has none). String does not validate; call Validate for that.
func (s Subject) String() string {
	n := len(prefix) + len(s.Version) + len(s.Project) + len(s.Channel) +
		len(s.Category) + len(s.Component) + len(s.Target) + 6
	for _, x := range s.Suffix {
		n += 1 + len(x)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(prefix)
	for _, x := range [...]string{s.Version, s.Project, s.Channel, string(s.Category), string(s.Component), s.Target} {
		b.WriteByte('.')
		b.WriteString(x)
	}
	for _, x := range s.Suffix {
		b.WriteByte('.')
		b.WriteString(x)
	}
	return b.String()
}

// Validate checks every field of s against the grammar, exactly as Parse
// would check s.String(). Errors match ErrInvalidSubject (and
// ErrInvalidToken for a single bad token).
func (s Subject) Validate() error {
	if err := s.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSubject, err)
	}
	return nil
}

func (s Subject) validate() error {
	if e := checkToken("ver", s.Version); e != nil {
		return e
	}
	if e := checkToken("project_id", s.Project); e != nil {
		return e
	}
	if e := checkToken("channel_id", s.Channel); e != nil {
		return e
	}
	if e := checkCategory(string(s.Category)); e != nil {
		return e
	}
	if e := checkComponent(s.Category, string(s.Component)); e != nil {
		return e
	}
	if e := checkToken(roleName(6, s.Category), s.Target); e != nil {
		return e
	}
	if s.Category == Svc && len(s.Suffix) > 0 {
		return fmt.Errorf("svc subject has %d suffix tokens, want none", len(s.Suffix))
	}
	for i, x := range s.Suffix {
		if e := checkToken(roleName(minTokens+i, s.Category), x); e != nil {
			return e
		}
	}
	return nil
}
