// Not Go: the TypeScript SDK (npm). This go.mod only makes the directory a
// module boundary, so that `go build|vet|test ./...` at the repository root
// never descends into node_modules (README.md, "Layout").
module github.com/utpmesh/utpmesh/pkg/sdk/typescript

go 1.26.8
