package web

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// DefaultDenylist are the prompt-injection patterns (case-insensitive Go
// regular expressions) a line is dropped for when the configuration sets
// none.
var DefaultDenylist = []string{
	`\b(ignore|disregard|forget|override)\b.{0,40}\b(previous|prior|above|earlier|all|your)\b.{0,20}\b(instructions?|prompts?|rules|directions)\b`,
	`\b(system|developer)\s+prompt\b`,
	`\byou are now\b.{0,40}\b(assistant|ai|model|agent|mode|dan)\b`,
	`\bnew instructions?\s*:`,
	`<\|?(im_start|im_end|system|endoftext)\|?>`,
	`\[/?(inst|sys)\]`,
	`^\s*(system|assistant)\s*:`,
}

// Sanitized is the pipeline's output.
type Sanitized struct {
	Title string
	Text  string
	// RemovedLines counts lines dropped by the injection denylist.
	RemovedLines int
	// Chars is the text's length in characters before truncation.
	Chars     int
	Truncated bool
}

// Sanitizer turns untrusted HTML or text into plain text. The same input
// gives the same output.
type Sanitizer struct {
	deny []*regexp.Regexp
}

// NewSanitizer compiles the denylist (nil: DefaultDenylist; empty: none).
func NewSanitizer(denylist []string) (*Sanitizer, error) {
	if denylist == nil {
		denylist = DefaultDenylist
	}
	s := &Sanitizer{}
	for i, p := range denylist {
		re, err := regexp.Compile("(?i)" + p)
		if err != nil {
			return nil, fmt.Errorf("web.injection_denylist[%d] %q is not a Go regular expression: %w", i, p, err)
		}
		s.deny = append(s.deny, re)
	}
	return s, nil
}

// dropped elements: active content, embedded documents, forms, and page
// chrome.
var dropped = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Iframe: true, atom.Frame: true, atom.Frameset: true,
	atom.Object: true, atom.Embed: true, atom.Applet: true, atom.Template: true, atom.Svg: true, atom.Math: true,
	atom.Canvas: true, atom.Form: true, atom.Input: true, atom.Button: true, atom.Select: true, atom.Textarea: true,
	atom.Option: true, atom.Nav: true, atom.Aside: true, atom.Dialog: true, atom.Link: true, atom.Meta: true,
	atom.Head: true, atom.Audio: true, atom.Video: true, atom.Picture: true, atom.Source: true, atom.Track: true,
	atom.Map: true, atom.Area: true, atom.Base: true,
}

// chromeRoles are ARIA roles of page chrome.
var chromeRoles = map[string]bool{"navigation": true, "banner": true, "contentinfo": true, "complementary": true,
	"search": true, "menu": true, "menubar": true, "toolbar": true, "dialog": true, "alert": true}

var block = map[atom.Atom]bool{
	atom.P: true, atom.Div: true, atom.Section: true, atom.Article: true, atom.Main: true, atom.Br: true, atom.Hr: true,
	atom.H1: true, atom.H2: true, atom.H3: true, atom.H4: true, atom.H5: true, atom.H6: true, atom.Li: true,
	atom.Ul: true, atom.Ol: true, atom.Dl: true, atom.Dt: true, atom.Dd: true, atom.Tr: true, atom.Table: true,
	atom.Blockquote: true, atom.Pre: true, atom.Figure: true, atom.Figcaption: true, atom.Header: true,
	atom.Footer: true, atom.Address: true, atom.Details: true, atom.Summary: true, atom.Caption: true,
}

var headingLevel = map[atom.Atom]int{atom.H1: 1, atom.H2: 2, atom.H3: 3, atom.H4: 4, atom.H5: 5, atom.H6: 6}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Namespace == "" && strings.EqualFold(a.Key, key) {
			return a.Val, true
		}
	}
	return "", false
}

var spaces = regexp.MustCompile(`\s+`)

// hidden reports elements a reader does not see.
func hidden(n *html.Node) bool {
	if _, ok := attr(n, "hidden"); ok {
		return true
	}
	if v, _ := attr(n, "aria-hidden"); strings.EqualFold(strings.TrimSpace(v), "true") {
		return true
	}
	if v, ok := attr(n, "style"); ok {
		st := strings.ToLower(spaces.ReplaceAllString(v, ""))
		for _, h := range []string{"display:none", "visibility:hidden", "font-size:0", "opacity:0;", "content-visibility:hidden"} {
			if strings.Contains(st+";", h) {
				return true
			}
		}
	}
	if v, _ := attr(n, "role"); chromeRoles[strings.ToLower(strings.TrimSpace(v))] {
		return true
	}
	return false
}

// inContent reports whether n is inside article, main or section (where
// header and footer are part of the content, not the page's chrome).
func inContent(n *html.Node) bool {
	for p := n.Parent; p != nil; p = p.Parent {
		if p.Type == html.ElementNode && (p.DataAtom == atom.Article || p.DataAtom == atom.Main || p.DataAtom == atom.Section) {
			return true
		}
	}
	return false
}

type textWriter struct {
	b strings.Builder
}

func (w *textWriter) newline() {
	if w.b.Len() > 0 {
		w.b.WriteByte('\n')
	}
}

func (w *textWriter) walk(n *html.Node, pre bool) {
	switch n.Type {
	case html.CommentNode, html.DoctypeNode:
		return
	case html.TextNode:
		if pre {
			w.b.WriteString(n.Data)
		} else {
			w.b.WriteString(spaces.ReplaceAllString(n.Data, " "))
		}
		return
	case html.ElementNode:
		if dropped[n.DataAtom] || hidden(n) {
			return
		}
		if (n.DataAtom == atom.Header || n.DataAtom == atom.Footer) && !inContent(n) {
			return
		}
		if n.Namespace != "" { // foreign content outside svg/math
			return
		}
	}
	isBlock := n.Type == html.ElementNode && block[n.DataAtom]
	if isBlock {
		w.newline()
		if l := headingLevel[n.DataAtom]; l > 0 {
			w.b.WriteString(strings.Repeat("#", l) + " ")
		}
		if n.DataAtom == atom.Li {
			w.b.WriteString("- ")
		}
	}
	if n.Type == html.ElementNode && (n.DataAtom == atom.Td || n.DataAtom == atom.Th) {
		w.b.WriteByte(' ')
	}
	p := pre || (n.Type == html.ElementNode && n.DataAtom == atom.Pre)
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		w.walk(c, p)
	}
	if isBlock {
		w.newline()
	}
}

func findTitle(n *html.Node) string {
	if n.Type == html.ElementNode && n.DataAtom == atom.Title {
		var b strings.Builder
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if c.Type == html.TextNode {
				b.WriteString(c.Data)
			}
		}
		return b.String()
	}
	if n.Type == html.ElementNode && n.DataAtom == atom.Svg {
		return ""
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if t := findTitle(c); t != "" {
			return t
		}
	}
	return ""
}

// HTML runs the pipeline on an HTML document (UTF-8): parse with the
// HTML5 parser, keep the visible text of the content, normalize, drop
// denylisted lines, truncate to maxChars.
func (s *Sanitizer) HTML(r io.Reader, maxChars int) (Sanitized, error) {
	doc, err := html.Parse(r)
	if err != nil {
		return Sanitized{}, fmt.Errorf("parse HTML: %w", err)
	}
	var w textWriter
	w.walk(doc, false)
	out := s.finish(w.b.String(), maxChars)
	title, removed := s.clean(findTitle(doc))
	out.Title = strings.Join(strings.Fields(title), " ")
	out.RemovedLines += removed
	return out, nil
}

// Text runs the pipeline on plain text.
func (s *Sanitizer) Text(text string, maxChars int) Sanitized {
	return s.finish(strings.ReplaceAll(text, "\r\n", "\n"), maxChars)
}

// Snippet sanitizes a short piece of HTML (a search result's title or
// snippet) into one line.
func (s *Sanitizer) Snippet(fragment string, maxChars int) (string, int) {
	out, err := s.HTML(strings.NewReader("<body>"+fragment+"</body>"), maxChars)
	if err != nil {
		return "", 0
	}
	return strings.Join(strings.Fields(out.Text), " "), out.RemovedLines
}

// invisible are characters that hide or reorder text: controls (except
// newline and tab), zero-width and bidirectional formatting characters.
func invisible(r rune) bool {
	if r == '\n' || r == '\t' {
		return false
	}
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError
}

// clean removes invisible characters and denylisted lines.
func (s *Sanitizer) clean(text string) (string, int) {
	text = strings.Map(func(r rune) rune {
		if invisible(r) {
			return -1
		}
		return r
	}, text)
	var kept []string
	removed := 0
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(strings.Join(strings.Fields(line), " "))
		deny := false
		for _, re := range s.deny {
			if re.MatchString(line) {
				deny = true
				break
			}
		}
		if deny {
			removed++
			continue
		}
		kept = append(kept, line)
	}
	return strings.Join(kept, "\n"), removed
}

// TruncationMarker is appended to truncated text: shown and total
// characters.
const TruncationMarker = "\n[truncated: %d of %d characters shown]"

func (s *Sanitizer) finish(text string, maxChars int) Sanitized {
	text, removed := s.clean(text)
	// Collapse blank lines: at most one empty line in a row, none at the
	// ends.
	var lines []string
	blank := false
	for _, l := range strings.Split(text, "\n") {
		if l == "" {
			blank = len(lines) > 0
			continue
		}
		if blank {
			lines = append(lines, "")
			blank = false
		}
		lines = append(lines, l)
	}
	text = strings.Join(lines, "\n")
	out := Sanitized{Text: text, RemovedLines: removed, Chars: utf8.RuneCountInString(text)}
	if maxChars > 0 && out.Chars > maxChars {
		runes := []rune(text)
		out.Text = string(runes[:maxChars]) + fmt.Sprintf(TruncationMarker, maxChars, out.Chars)
		out.Truncated = true
	}
	return out
}
