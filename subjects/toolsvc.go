package subjects

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Tool-scoped service subjects
//
//	cg.<ver>.<project_id>.<channel_id>.svc.<service>.<op>.<tool>
//
// are a mesh service's operation done on behalf of one tool: the CardStore's
// claim, release and put_result of a tool worker carry the tool in their
// subject, so a NATS publish permission on the subject proves the requester
// may act for that tool (internal/meshauth, docs/security.md). They have one
// token more than a plain svc subject, so Parse (which allows svc subjects
// of exactly seven tokens) refuses them and a service listening on
// svc.<service>.* never receives them; use ParseToolService.

// ToolSubject is a parsed tool-scoped service subject.
type ToolSubject struct {
	Version, Project, Channel string
	// Service and Op are the service and operation tokens.
	Service, Op string
	// Tool is the tool token (ToolToken of the tool's name).
	Tool string
}

// String returns the dotted form.
func (t ToolSubject) String() string {
	return prefix + "." + t.Version + "." + t.Project + "." + t.Channel + ".svc." + t.Service + "." + t.Op + "." + t.Tool
}

// ToolService builds cg.<ver>.<project>.<channel>.svc.<service>.<op>.<tool>,
// where tool is a tool name (any string; it is made a token by ToolToken).
func ToolService(ver, project, channel, service, op, tool string) (ToolSubject, error) {
	s, err := Service(ver, project, channel, service, op)
	if err != nil {
		return ToolSubject{}, err
	}
	if tool == "" {
		return ToolSubject{}, buildErr(&TokenError{Role: "tool", Token: tool, Reason: "empty"})
	}
	return ToolSubject{Version: s.Version, Project: s.Project, Channel: s.Channel, Service: service, Op: op, Tool: ToolToken(tool)}, nil
}

// ParseToolService parses a tool-scoped service subject. Errors match
// ErrInvalidSubject.
func ParseToolService(s string) (ToolSubject, error) {
	i := strings.LastIndexByte(s, '.')
	if i < 0 {
		return ToolSubject{}, fmt.Errorf("%w %s: want cg.<ver>.<project_id>.<channel_id>.svc.<service>.<op>.<tool>", ErrInvalidSubject, quoteShort(s))
	}
	sub, err := Parse(s[:i])
	if err != nil {
		return ToolSubject{}, err
	}
	if sub.Category != Svc {
		return ToolSubject{}, fmt.Errorf("%w %s: not a svc subject (want cg.<ver>.<project_id>.<channel_id>.svc.<service>.<op>.<tool>)", ErrInvalidSubject, quoteShort(s))
	}
	tool := s[i+1:]
	if e := checkToken("tool", tool); e != nil {
		return ToolSubject{}, fmt.Errorf("%w %s: %w", ErrInvalidSubject, quoteShort(s), e)
	}
	return ToolSubject{Version: sub.Version, Project: sub.Project, Channel: sub.Channel, Service: string(sub.Component), Op: sub.Target, Tool: tool}, nil
}

// ToolServicePattern returns cg.<ver>.*.*.svc.<service>.*.*: every
// tool-scoped operation of service in every project and channel.
func ToolServicePattern(ver, service string) (string, error) {
	p, err := ServicePattern(ver, service)
	if err != nil {
		return "", err
	}
	return p + ".*", nil
}

// ToolServiceAllow returns cg.<ver>.*.*.svc.<service>.<op>.<ToolToken(tool)>,
// the publish permission that lets an identity do op for one tool in every
// project and channel.
func ToolServiceAllow(ver, service, op, tool string) (string, error) {
	p, err := ServiceOpPattern(ver, service, op)
	if err != nil {
		return "", err
	}
	if tool == "" {
		return "", buildErr(&TokenError{Role: "tool", Token: tool, Reason: "empty"})
	}
	return p + "." + ToolToken(tool), nil
}

// maxToolToken keeps a tool token, with its hash suffix, within MaxTokenLen.
const maxToolToken = 100

// ToolToken maps a tool name to the subject token that stands for it in
// tool-scoped subjects: the name itself when it is a valid token of at
// most 100 bytes, else the name with every other byte replaced by '_',
// cut to 100 bytes, plus '_' and 8 hex digits of its SHA-256 (so two
// names that differ only in such bytes get different tokens).
func ToolToken(name string) string {
	if len(name) <= maxToolToken && checkToken("tool", name) == nil {
		return name
	}
	b := []byte(name)
	for i, c := range b {
		if !tokenChar[c] {
			b[i] = '_'
		}
	}
	if len(b) > maxToolToken {
		b = b[:maxToolToken]
	}
	sum := sha256.Sum256([]byte(name))
	return string(b) + "_" + hex.EncodeToString(sum[:4])
}

// Audit builds cg.<ver>.<project>.<channel>.evt.sys.audit.<service>, the
// subject of the security audit records of a mesh service (refused
// forgeries, administrative changes; internal/audit).
func Audit(ver, project, channel, service string) (Subject, error) {
	return Event(ver, project, channel, Sys, "audit", service)
}

// AuditPattern returns cg.<ver>.*.*.evt.sys.audit.>, every audit record.
func AuditPattern(ver string) (string, error) {
	if e := checkToken("ver", ver); e != nil {
		return "", e
	}
	return prefix + "." + ver + ".*.*.evt.sys.audit.>", nil
}
