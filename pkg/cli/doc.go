// Package cli is the contract between the utpmesh command line
// (cmd/utpmesh) and the catalogues that contribute verbs to it: a
// catalogue implements Verb (e.g. services/atp/atpcli's `utpmesh atp` and
// `utpmesh hem`), and the command line registers the verbs of the
// catalogues it selects and runs them with an Env that gives them its
// conventions (flags anywhere, did-you-mean, --json, exit code 2 for a
// usage mistake) and tool calls made with its connection and identity
// flags.
//
// The package depends on the standard library only.
package cli
