package cardstore

import "strings"

// CallKeyPrefix starts the claim key of every tool call (CallKey.String).
// Keys with this prefix are reserved for tool calls: natsstore serves them
// only on a tool's own subjects.
const CallKeyPrefix = "toolcall/"

// CallKey names one tool call of a project: the pair (agent_turn_id,
// tool_call_id). Its String is the call's claim key, the one encoding of
// a call's identity every store and worker uses.
type CallKey struct {
	AgentTurnID string
	ToolCallID  string
}

// String returns the call's claim key:
//
//	toolcall/<agent_turn_id>/<tool_call_id>
//
// where, in the agent_turn_id only, each '%' is written "%25" and each
// '/' "%2F"; the tool_call_id is written as it is. For a turn id holding
// neither '/' nor '%' the key is therefore the plain join that
// docs/protocol.md has always described. The first '/' after the prefix
// ends the turn part, so two different calls never share a key.
func (k CallKey) String() string {
	turn := k.AgentTurnID
	if strings.ContainsAny(turn, "/%") {
		turn = escapeTurn(turn)
	}
	return CallKeyPrefix + turn + "/" + k.ToolCallID
}

// ParseCallKey is the inverse of CallKey.String: it returns the call a
// claim key names, and false when key names none (another prefix, no '/'
// after the turn part, an escape other than "%25" or "%2F" in it, or a
// part that CheckKeyPart refuses). For every key it accepts,
// ParseCallKey(key) formats back to key.
func ParseCallKey(key string) (CallKey, bool) {
	rest, ok := strings.CutPrefix(key, CallKeyPrefix)
	if !ok {
		return CallKey{}, false
	}
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return CallKey{}, false
	}
	turn, ok := unescapeTurn(rest[:i])
	if !ok {
		return CallKey{}, false
	}
	k := CallKey{AgentTurnID: turn, ToolCallID: rest[i+1:]}
	if CheckKeyPart("agent_turn_id", k.AgentTurnID) != nil || CheckKeyPart("tool_call_id", k.ToolCallID) != nil {
		return CallKey{}, false
	}
	return k, true
}

// escapeTurn writes '%' as "%25" and '/' as "%2F".
func escapeTurn(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case '/':
			b.WriteString("%2F")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// unescapeTurn undoes escapeTurn, accepting only its two escapes (so that
// one turn id has exactly one written form).
func unescapeTurn(s string) (string, bool) {
	if strings.IndexByte(s, '%') < 0 {
		return s, true
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "%25"):
			b.WriteByte('%')
		case strings.HasPrefix(s[i:], "%2F"):
			b.WriteByte('/')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}
