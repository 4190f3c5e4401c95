package web

import (
	"bufio"
	"strings"
)

// robots is a parsed robots.txt (RFC 9309): the rules of the group that
// names our product token, else of the "*" group.
type robots struct {
	rules []robotsRule
}

type robotsRule struct {
	allow   bool
	pattern string
}

// parseRobots reads a robots.txt for the product token agent.
func parseRobots(body, agent string) *robots {
	agent = strings.ToLower(agent)
	type group struct {
		agents []string
		rules  []robotsRule
	}
	var groups []*group
	var cur *group
	lastWasAgent := false
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		key, val = strings.ToLower(strings.TrimSpace(key)), strings.TrimSpace(val)
		switch key {
		case "user-agent":
			if cur == nil || !lastWasAgent {
				cur = &group{}
				groups = append(groups, cur)
			}
			cur.agents = append(cur.agents, strings.ToLower(val))
			lastWasAgent = true
		case "allow", "disallow":
			lastWasAgent = false
			if cur == nil {
				continue
			}
			if val == "" { // "Disallow:" allows everything
				continue
			}
			cur.rules = append(cur.rules, robotsRule{allow: key == "allow", pattern: val})
		default:
			lastWasAgent = false
		}
	}
	var mine, star []robotsRule
	foundMine := false
	for _, g := range groups {
		for _, a := range g.agents {
			switch {
			case a == "*":
				star = append(star, g.rules...)
			case a != "" && strings.Contains(agent, a):
				mine = append(mine, g.rules...)
				foundMine = true
			}
		}
	}
	if foundMine {
		return &robots{rules: mine}
	}
	return &robots{rules: star}
}

// allowed applies the longest matching rule to path (with its query);
// Allow wins a tie; no match allows.
func (r *robots) allowed(path string) bool {
	best, allow := -1, true
	for _, rule := range r.rules {
		if !robotsMatch(rule.pattern, path) {
			continue
		}
		n := len(rule.pattern)
		if n > best || (n == best && rule.allow) {
			best, allow = n, rule.allow
		}
	}
	return allow
}

// robotsMatch matches a robots pattern ('*' any run, '$' end) against
// the start of path.
func robotsMatch(pattern, path string) bool {
	anchored := strings.HasSuffix(pattern, "$")
	pattern = strings.TrimSuffix(pattern, "$")
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(path, parts[0]) {
		return false
	}
	pos := len(parts[0])
	for i, p := range parts[1:] {
		last := i == len(parts)-2
		if last && anchored {
			return strings.HasSuffix(path[pos:], p)
		}
		j := strings.Index(path[pos:], p)
		if j < 0 {
			return false
		}
		pos += j + len(p)
	}
	if anchored && len(parts) == 1 {
		return pos == len(path)
	}
	return true
}
