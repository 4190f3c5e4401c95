package deploy

import (
	"fmt"
	"strings"
)

// shellWord is one word of a shell command line; op marks an operator
// (| ; & < > ( )), which ends a simple command.
type shellWord struct {
	text string
	op   bool
}

// shellWords splits one line of POSIX shell into words: quotes ('...',
// "..." with \" \\ \$ escapes) and backslashes are removed; $VAR and
// $(...) are kept as text (the CLI sees a string it cannot expand).
func shellWords(line string) ([]shellWord, error) {
	var (
		out    []shellWord
		cur    strings.Builder
		inWord bool
	)
	flush := func() {
		if inWord {
			out = append(out, shellWord{text: cur.String()})
			cur.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && !inWord:
			return out, nil
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", line)
			}
			cur.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '"':
			inWord = true
			for i++; ; i++ {
				if i >= len(line) {
					return nil, fmt.Errorf("unterminated \" in %q", line)
				}
				if line[i] == '"' {
					break
				}
				if line[i] == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(line[i])
			}
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			inWord = true
		case c == '$' && i+1 < len(line) && line[i+1] == '(':
			// $(...) is one word for our purposes.
			depth := 0
			for ; i < len(line); i++ {
				cur.WriteByte(line[i])
				if line[i] == '(' {
					depth++
				} else if line[i] == ')' {
					depth--
					if depth == 0 {
						break
					}
				}
			}
			inWord = true
		case strings.IndexByte("|;&<>()", c) >= 0:
			flush()
			out = append(out, shellWord{text: string(c), op: true})
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return out, nil
}

// shellCommands finds the utpmesh command lines in a shell text (a script
// or a README's sh block): lines joined at trailing backslashes, comments
// skipped, each "utpmesh SUBCOMMAND ..." up to the end of its simple
// command. Words that are exactly "$@" (a script's own arguments) are
// dropped. subcommands are the CLI's command names.
func shellCommands(src, text string, subcommands []string) ([]cmdline, error) {
	var out []cmdline
	raw := strings.Split(text, "\n")
	for n := 0; n < len(raw); n++ {
		first := n + 1
		line := raw[n]
		for strings.HasSuffix(line, "\\") && n+1 < len(raw) {
			n++
			line = strings.TrimSuffix(line, "\\") + " " + raw[n]
		}
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		words, err := shellWords(line)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", src, first, err)
		}
		for i, w := range words {
			if w.op || (w.text != "utpmesh" && !strings.HasSuffix(w.text, "/utpmesh")) {
				continue
			}
			if i+1 >= len(words) || words[i+1].op {
				continue
			}
			found := false
			for _, s := range subcommands {
				found = found || words[i+1].text == s
			}
			if !found {
				continue
			}
			c := cmdline{src: fmt.Sprintf("%s line %d", src, first)}
			for _, a := range words[i+1:] {
				if a.op {
					break
				}
				if a.text != "$@" {
					c.argv = append(c.argv, a.text)
				}
			}
			out = append(out, c)
		}
	}
	return out, nil
}
