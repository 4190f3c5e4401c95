package deadline_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// requestMethods are the nats.Conn and nats.Subscription methods that
// wait for a reply. Only this
// package calls them: everyone else goes through Request or RequestMsg.
var requestMethods = map[string]bool{
	"Request": true, "RequestWithContext": true, "RequestMsg": true, "RequestMsgWithContext": true,
	"OldRequest": true, "OldRequestWithContext": true, "NextMsgWithContext": true,
}

// ownDir is this package's directory, relative to the module root.
const ownDir = "internal/deadline"

// violations lists the raw request calls of one file, as
// "file:line: what".
func violations(fset *token.FileSet, f *ast.File) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !requestMethods[sel.Sel.Name] {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "deadline" {
			return true // this package's own Request and RequestMsg
		}
		out = append(out, fmt.Sprintf("%s: .%s(…) waits for a reply without the mesh's deadline; call deadline.Request or deadline.RequestMsg (internal/deadline) instead",
			fset.Position(call.Pos()), sel.Sel.Name))
		return true
	})
	return out
}

// TestViolations: the check finds raw request calls, and only those.
func TestViolations(t *testing.T) {
	tests := []struct {
		name, src string
		want      int
	}{
		{"request with context", `nc.RequestWithContext(ctx, "a", nil)`, 1},
		{"request msg with context", `x.nc.RequestMsgWithContext(ctx, m)`, 1},
		{"request with a timeout", `nc.Request("a", nil, time.Second)`, 1},
		{"request msg", `nc.RequestMsg(m, time.Second)`, 1},
		{"old request", `nc.OldRequest("a", nil, time.Second)`, 1},
		{"next message with context", `sub.NextMsgWithContext(ctx)`, 1},
		{"the wrapper", `deadline.RequestMsg(ctx, nc, m)`, 0},
		{"the wrapper's next message", `deadline.NextMsg(ctx, sub)`, 0},
		{"publish", `nc.PublishMsg(m)`, 0},
		{"a method value is not a call", `f := nc.Request; _ = f`, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := "package p\nfunc f() {\n" + tc.src + "\n}\n"
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "p.go", src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			if got := violations(fset, f); len(got) != tc.want {
				t.Fatalf("violations = %q, want %d", got, tc.want)
			}
		})
	}
}

// TestEveryRequestHasADeadline fails when a non-test file of the module
// sends a NATS request itself instead of through this package, which
// bounds it (see the package doc).
func TestEveryRequestHasADeadline(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root %s: %v", root, err)
	}
	fset := token.NewFileSet()
	var bad []string
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "node_modules" || rel == ownDir) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, v := range violations(fset, f) {
			bad = append(bad, strings.TrimPrefix(v, root+string(filepath.Separator)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("checked only %d files under %s: is the walk wrong?", files, root)
	}
	for _, v := range bad {
		t.Error(v)
	}
}
