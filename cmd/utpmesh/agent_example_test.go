package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/internal/gomodtest"
)

// agentExample is the pkg/agent example that runs against a local up.
const (
	agentExampleFile = "../../pkg/agent/example_test.go"
	agentExampleFunc = "ExampleClient_Dispatch"
)

// exampleProgram turns function fn of the Go file at path into a main
// package: its body as main's, with the file's imports that the body uses.
func exampleProgram(t *testing.T, file, fn string) string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var decl *ast.FuncDecl
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == fn {
			decl = fd
		}
	}
	if decl == nil {
		t.Fatalf("%s has no func %s", file, fn)
	}
	used := map[string]bool{}
	ast.Inspect(decl.Body, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		}
		return true
	})
	var b strings.Builder
	b.WriteString("// Command example is " + fn + " of " + path.Base(file) + ", run as a program.\npackage main\n\nimport (\n")
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := strings.TrimSuffix(path.Base(p), ".go")
		if imp.Name != nil {
			name = imp.Name.Name
		}
		if used[name] {
			b.WriteString("\t" + imp.Path.Value + "\n")
		}
	}
	b.WriteString(")\n\nfunc main() ")
	b.Write(src[fset.Position(decl.Body.Pos()).Offset:fset.Position(decl.Body.End()).Offset])
	b.WriteString("\n")
	return b.String()
}

// TestAgentExampleAgainstUp runs pkg/agent's ExampleClient_Dispatch, as
// written, as a program of its own module beside a real 'utpmesh up' (in
// up's directory, $NATS_URL at up's random port): with the project's
// agent identity and the demo mandate up wrote, it dispatches echo, is
// woken, resumes the turn and acknowledges the result.
func TestAgentExampleAgainstUp(t *testing.T) {
	prog := exampleProgram(t, agentExampleFile, agentExampleFunc)
	mod := t.TempDir()
	gomodtest.Write(t, mod, map[string]string{
		"go.mod":  gomodtest.GoMod("example.com/agentexample", gomodtest.GoVersion(t), gomodtest.Root(t)),
		"main.go": prog,
	})
	bin := gomodtest.Build(t, mod, "example")

	clone := t.TempDir()
	_, url, _ := startREADMEUp(t, clone, guideEnv("UTPMESH_TEST_EXEC=1"))
	cmd := exec.Command(bin)
	cmd.Dir, cmd.Env = clone, guideEnv("NATS_URL="+url)
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "success {\"msg\":\"parked\"}\n" {
		t.Fatalf("%s against up: %v\n%s\nprogram:\n%s", agentExampleFunc, err, out, prog)
	}
}
