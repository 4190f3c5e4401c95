package authz

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/utpmesh/utpmesh/internal/suggest"
)

// ExplainParseError turns a cedar-go syntax error about text into words
// with a line and column: "line 2, column 1: expected ';' to end the
// policy that starts at line 1, column 1, found 'permit'". cedar-go reports
// the token after the one it choked on and says "exact got X want Y"; this
// re-scans text to point at the offending token and names the bracket a
// missing closer belongs to. Errors it does not recognise keep cedar-go's
// words after the position. It never fails; for a nil error it returns "".
func ExplainParseError(text string, err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	m := parseErrRe.FindStringSubmatch(msg)
	if m == nil {
		if m = scanErrRe.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			col, _ := strconv.Atoi(m[2])
			return explainScanError(line, col, m[3])
		}
		return "cannot parse: " + strings.TrimPrefix(msg, "parser error: ")
	}
	line, _ := strconv.Atoi(m[1])
	col, _ := strconv.Atoi(m[2])
	detail := m[4]
	toks := scanTokens(text)
	at := len(toks) // the token cedar-go reported; len(toks) is the end of the text
	for i, t := range toks {
		if t.line == line && t.col == col {
			at = i
			break
		}
	}
	endLine, endCol := endOf(text)
	if at == len(toks) && (line != endLine || col != endCol) {
		// The scan disagrees with cedar-go: keep its position and words.
		return fmt.Sprintf("line %d, column %d: %s", line, col, detail)
	}
	e := explainer{text: text, toks: toks, at: at, endLine: endLine, endCol: endCol}
	if g := exactRe.FindStringSubmatch(detail); g != nil {
		return e.exact(g[1], g[2])
	}
	if g := effectRe.FindStringSubmatch(detail); g != nil {
		return e.effect(g[1])
	}
	return e.other(detail)
}

var (
	parseErrRe = regexp.MustCompile(`parse error at [^\s]*?:(\d+):(\d+) ("(?:[^"\\]|\\.)*"): (.*)$`)
	scanErrRe  = regexp.MustCompile(`:(\d+):(\d+): (.*)$`)
	exactRe    = regexp.MustCompile(`^exact got (.*) want (.*)$`)
	effectRe   = regexp.MustCompile(`^unexpected effect: (.*)$`)
)

func explainScanError(line, col int, msg string) string {
	switch msg {
	case "literal not terminated":
		msg = `the string starting here is not closed; add the closing "`
	case "comment not terminated":
		msg = "the comment starting here is not closed; add */"
	case "invalid char escape":
		msg = `invalid escape in a string; use \" \\ \n \r \t \0 \' or \u{…}`
	}
	return fmt.Sprintf("line %d, column %d: %s", line, col, msg)
}

type ptok struct {
	text      string
	line, col int
	// endLine and endCol are just after the token.
	endLine, endCol int
}

// scanTokens splits Cedar text into tokens with their positions (1-based,
// columns count characters as cedar-go does). It never fails: an
// unterminated string or comment runs to the end.
func scanTokens(text string) []ptok {
	var out []ptok
	line, col := 1, 1
	i := 0
	adv := func(n int) {
		for k := 0; k < n && i < len(text); {
			r, size := utf8.DecodeRuneInString(text[i:])
			if r == '\n' {
				line, col = line+1, 1
			} else {
				col++
			}
			i += size
			k += size
		}
	}
	for i < len(text) {
		c := text[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			adv(1)
			continue
		case strings.HasPrefix(text[i:], "//"):
			j := strings.IndexByte(text[i:], '\n')
			if j < 0 {
				j = len(text) - i
			}
			adv(j)
			continue
		case strings.HasPrefix(text[i:], "/*"):
			j := strings.Index(text[i+2:], "*/")
			if j < 0 {
				adv(len(text) - i)
			} else {
				adv(j + 4)
			}
			continue
		}
		start, sl, sc := i, line, col
		n := 1
		switch {
		case c == '"':
			for n < len(text)-i && text[i+n] != '"' {
				if text[i+n] == '\\' {
					n++
				}
				n++
			}
			n = min(n+1, len(text)-i)
		case isIdentStart(c):
			for n < len(text)-i && isIdentPart(text[i+n]) {
				n++
			}
		case c >= '0' && c <= '9':
			for n < len(text)-i && text[i+n] >= '0' && text[i+n] <= '9' {
				n++
			}
		case i+1 < len(text) && isPair(text[i:i+2]):
			n = 2
		default:
			_, n = utf8.DecodeRuneInString(text[i:])
		}
		adv(n)
		out = append(out, ptok{text: text[start:i], line: sl, col: sc, endLine: line, endCol: col})
	}
	return out
}

func isPair(s string) bool {
	switch s {
	case "::", "==", "!=", "<=", ">=", "&&", "||":
		return true
	}
	return false
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentPart(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

// endOf is the position just after the last character of text.
func endOf(text string) (int, int) {
	line, col := 1, 1
	for _, r := range text {
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

type explainer struct {
	text            string
	toks            []ptok
	at              int
	endLine, endCol int
}

// describe names a token for a message: 'permit', or "the end of the text".
func (e *explainer) describe(i int) string {
	if i < 0 || i >= len(e.toks) {
		return "the end of the text"
	}
	return fmt.Sprintf("'%s'", e.toks[i].text)
}

func (e *explainer) pos(i int) string {
	if i < 0 || i >= len(e.toks) {
		return fmt.Sprintf("line %d, column %d", e.endLine, e.endCol)
	}
	return fmt.Sprintf("line %d, column %d", e.toks[i].line, e.toks[i].col)
}

// after is the position just after token i (where a missing token goes).
func (e *explainer) after(i int) string {
	if i < 0 {
		return "line 1, column 1"
	}
	if i >= len(e.toks) {
		return fmt.Sprintf("line %d, column %d", e.endLine, e.endCol)
	}
	return fmt.Sprintf("line %d, column %d", e.toks[i].endLine, e.toks[i].endCol)
}

var closerOf = map[string]string{"(": ")", "[": "]", "{": "}"}

// opener finds the unclosed bracket that a closer at token index upto
// would close, or -1.
func (e *explainer) opener(upto int) int {
	var stack []int
	for i := 0; i < upto && i < len(e.toks); i++ {
		t := e.toks[i].text
		switch t {
		case "(", "[", "{":
			stack = append(stack, i)
		case ")", "]", "}":
			if len(stack) > 0 && closerOf[e.toks[stack[len(stack)-1]].text] == t {
				stack = stack[:len(stack)-1]
			}
		case ";":
			stack = stack[:0]
		}
	}
	if len(stack) == 0 {
		return -1
	}
	return stack[len(stack)-1]
}

// policyStart is the index of the first token of the policy holding
// token i (after the previous ';').
func (e *explainer) policyStart(i int) int {
	for j := min(i, len(e.toks)) - 1; j >= 0; j-- {
		if e.toks[j].text == ";" {
			return j + 1
		}
	}
	return 0
}

// exact explains "exact got G want W": cedar-go consumed token G (the one
// before the reported token) where it needed W.
func (e *explainer) exact(got, want string) string {
	g := e.at - 1 // the token cedar-go consumed
	if got == "" || g < 0 || g >= len(e.toks) || e.toks[g].text != got {
		g = e.at // end of text, or a scan mismatch: use the reported token
		if got == "" {
			g = len(e.toks)
		}
	}
	found := e.describe(g)
	if g >= len(e.toks) {
		found = "the policy text ended"
	}
	if closer := want; closer == ")" || closer == "]" || closer == "}" {
		if o := e.opener(g); o >= 0 && closerOf[e.toks[o].text] == closer {
			if g >= len(e.toks) {
				return fmt.Sprintf("%s: expected '%s' to close the '%s' at %s, but the policy text ended", e.pos(g), closer, e.toks[o].text, e.pos(o))
			}
			return fmt.Sprintf("%s: expected '%s' to close the '%s' at %s, found %s", e.pos(g), closer, e.toks[o].text, e.pos(o), found)
		}
		return fmt.Sprintf("%s: expected '%s', found %s", e.pos(g), closer, found)
	}
	if want == ";" {
		start := e.pos(e.policyStart(g))
		switch {
		case g >= len(e.toks):
			return fmt.Sprintf("%s: missing ';' at the end of the policy that starts at %s", e.after(g-1), start)
		case got == "permit" || got == "forbid" || got == "@":
			return fmt.Sprintf("%s: missing ';' at the end of the policy that starts at %s (the next policy starts at %s)", e.after(g-1), start, e.pos(g))
		case got == "}" || got == ")" || got == "]":
			return fmt.Sprintf("%s: stray '%s' with nothing open to close; remove it", e.pos(g), got)
		case isIdentStart(got[0]):
			hint := ""
			if s := nearest(got, []string{"when", "unless"}); s != "" {
				hint = fmt.Sprintf(" (did you mean '%s'?)", s)
			}
			return fmt.Sprintf("%s: unknown keyword '%s' after the policy scope; expected 'when { … }', 'unless { … }' or ';'%s", e.pos(g), got, hint)
		}
		return fmt.Sprintf("%s: expected ';' to end the policy that starts at %s, found %s", e.pos(g), start, found)
	}
	if g >= len(e.toks) {
		return fmt.Sprintf("%s: expected '%s', but the policy text ended", e.pos(g), want)
	}
	hint := ""
	if want == "principal" || want == "action" || want == "resource" {
		hint = "; the scope is (principal, action, resource)"
	}
	return fmt.Sprintf("%s: expected '%s', found %s%s", e.pos(g), want, found, hint)
}

// effect explains "unexpected effect: X": a policy must start with permit
// or forbid.
func (e *explainer) effect(got string) string {
	g := e.at - 1
	if g < 0 || g >= len(e.toks) || e.toks[g].text != got {
		g = e.at
	}
	hint := ""
	if got != "" && isIdentStart(got[0]) {
		if s := nearest(got, []string{"permit", "forbid"}); s != "" {
			hint = fmt.Sprintf(" (did you mean '%s'?)", s)
		}
	}
	return fmt.Sprintf("%s: a policy starts with 'permit' or 'forbid' (after optional @annotations), found %s%s", e.pos(g), e.describe(g), hint)
}

// other explains the remaining parser errors, which cedar-go reports at
// the offending token itself.
func (e *explainer) other(detail string) string {
	found := e.describe(e.at)
	switch {
	case detail == "invalid primary":
		// cedar-go consumed the token that cannot start an expression.
		g := e.at - 1
		if g < 0 || g >= len(e.toks) {
			return fmt.Sprintf("%s: expected an expression, found %s", e.pos(e.at), found)
		}
		bad := e.toks[g].text
		if isIdentStart(bad[0]) {
			hint := ""
			if s := nearest(bad, []string{"principal", "action", "resource", "context"}); s != "" {
				hint = fmt.Sprintf(" (did you mean '%s'?)", s)
			}
			return fmt.Sprintf("%s: unknown name '%s'; an expression starts with principal, action, resource, context, a literal or Type::\"id\"%s", e.pos(g), bad, hint)
		}
		if g > 0 {
			return fmt.Sprintf("%s: expected an expression after '%s', found %s", e.pos(g), e.toks[g-1].text, e.describe(g))
		}
		return fmt.Sprintf("%s: expected an expression, found %s", e.pos(g), e.describe(g))
	case detail == "unexpected token":
		return fmt.Sprintf("%s: unexpected %s", e.pos(e.at), found)
	case strings.HasPrefix(detail, "expected "):
		return fmt.Sprintf("%s: %s, found %s", e.pos(e.at), detail, found)
	case strings.HasPrefix(detail, "got ") && strings.HasSuffix(detail, " want ,"):
		return fmt.Sprintf("%s: expected ',' between list items, found %s", e.pos(e.at), found)
	}
	return fmt.Sprintf("%s: %s (near %s)", e.pos(e.at), detail, found)
}

// nearest returns the candidate closest to s (ignoring case) when it is
// near enough to be a typo, else "".
func nearest(s string, candidates []string) string {
	return suggest.Nearest(s, candidates, suggest.Limit(len(s), 3), true)
}
