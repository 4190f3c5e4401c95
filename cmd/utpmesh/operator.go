package main

import (
	"path/filepath"
	"strings"

	"github.com/utpmesh/utpmesh/internal/meshauth"
	"github.com/utpmesh/utpmesh/pkg/creds"
)

// defaultOperatorCredsPath is the operator identity a local 'utpmesh up'
// writes with its default --data directory; the operator's verbs (utpmesh
// hem …) use it when no --creds is given.
var defaultOperatorCredsPath = creds.SeedPath(defaultCredsDir, meshauth.DefaultOperator)

// credsKind is what a credentials file's name says its identity is.
type credsKind int

const (
	// credsOperator: operator.nk or operator-<name>.nk, or a file whose
	// name says nothing (the caller passed it for an operator's verb).
	credsOperator credsKind = iota
	// credsAgent: agent-<project>[.<agent>].nk.
	credsAgent
	// credsOther: admin.nk, core.nk, worker-<service>.nk: identities that
	// are not an operator's.
	credsOther
)

// kindOfCreds reads the identity of a credentials file from its name
// (meshauth.Identity.Name: what 'utpmesh up' and 'utpmesh identity add'
// write) and, for an operator's, the operator's name: operator-<name>.nk
// is <name>'s, any other the default operator's.
func kindOfCreds(path string) (kind credsKind, operator string) {
	base := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".nk"), ".creds")
	switch {
	case base == meshauth.RoleAdmin, base == meshauth.RoleCore, strings.HasPrefix(base, meshauth.RoleWorker+"-"):
		return credsOther, ""
	case strings.HasPrefix(base, meshauth.RoleAgent+"-"):
		return credsAgent, ""
	}
	if name, ok := strings.CutPrefix(base, meshauth.RoleOperator+"-"); ok && name != "" {
		return credsOperator, name
	}
	return credsOperator, meshauth.DefaultOperator
}

// operatorCredsHint names the operator's seed next to path (or the local
// mesh's), for messages.
func operatorCredsHint(path string) string {
	if path == "" {
		return defaultOperatorCredsPath
	}
	return filepath.Join(filepath.Dir(path), meshauth.DefaultOperator+".nk")
}

// resolveOperator decides how an operator's verb calls, from --creds
// (given) and the local mesh's files: as the operator name (creds: the
// file to connect with, "" for none), or as an agent (asAgent: the mesh
// refuses operator-only tools to it, with auth_failed operator_only). The
// admin's, the core's and a worker's credentials are a usage error naming
// the operator's file.
func resolveOperator(given string) (credsFile, name string, asAgent bool, err error) {
	credsFile = given
	if credsFile == "" {
		switch {
		case fileExists(defaultOperatorCredsPath):
			credsFile = defaultOperatorCredsPath
		case fileExists(defaultCredsPath):
			return "", "", false, usagef("this is an operator's command and only the admin identity %s is at hand: pass the operator's, --creds %s",
				defaultCredsPath, defaultOperatorCredsPath)
		default:
			// No local identities: a mesh run --insecure, or one whose
			// credentials live elsewhere (the server says so).
			return "", meshauth.DefaultOperator, false, nil
		}
	}
	kind, name := kindOfCreds(credsFile)
	switch kind {
	case credsOther:
		return "", "", false, usagef("--creds %s is not an operator's identity, and this is an operator's command (operators decide; the admin key and workers do not): pass the operator's, --creds %s",
			credsFile, operatorCredsHint(credsFile))
	case credsAgent:
		return credsFile, "", true, nil
	}
	return credsFile, name, false, nil
}
