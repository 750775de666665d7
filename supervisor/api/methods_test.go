package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestMethodsCoverTheDescriptors: Methods names each method once, and
// every descriptor of the package (a var made by method or stream, or a
// Method or StreamMethod literal) is in it: a descriptor made any other
// way would not be served, nor listed.
func TestMethodsCoverTheDescriptors(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range Methods {
		if seen[m] {
			t.Errorf("method %q is declared twice", m)
		}
		seen[m] = true
	}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				for i, v := range spec.(*ast.ValueSpec).Values {
					name, ok := descriptorName(v)
					if !ok {
						continue
					}
					found = append(found, name)
					if !seen[name] {
						t.Errorf("%s (%q) is not in Methods", spec.(*ast.ValueSpec).Names[i].Name, name)
					}
				}
			}
		}
	}
	if len(found) != len(Methods) {
		t.Errorf("%d descriptors in the source, %d names in Methods", len(found), len(Methods))
	}
	if !slices.Contains(Methods, AgentSend.Name) || !slices.Contains(Methods, ToolCall.Name) {
		t.Errorf("Methods lacks agent.send or tool.call: %v", Methods)
	}
}

// descriptorName returns the method name of a descriptor expression:
// method[P, R]("name"), stream[P, F, R]("name"), or a Method[P, R] or
// StreamMethod[P, F, R] literal.
func descriptorName(e ast.Expr) (string, bool) {
	generic := func(x ast.Expr) string {
		switch x := x.(type) {
		case *ast.IndexExpr:
			x2, _ := x.X.(*ast.Ident)
			if x2 != nil {
				return x2.Name
			}
		case *ast.IndexListExpr:
			x2, _ := x.X.(*ast.Ident)
			if x2 != nil {
				return x2.Name
			}
		}
		return ""
	}
	lit := func(args []ast.Expr) (string, bool) {
		if len(args) != 1 {
			return "", false
		}
		if kv, ok := args[0].(*ast.KeyValueExpr); ok {
			args[0] = kv.Value
		}
		b, ok := args[0].(*ast.BasicLit)
		if !ok || b.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(b.Value)
		return s, err == nil
	}
	switch e := e.(type) {
	case *ast.CallExpr:
		if g := generic(e.Fun); g == "method" || g == "stream" {
			return lit(e.Args)
		}
	case *ast.CompositeLit:
		if g := generic(e.Type); g == "Method" || g == "StreamMethod" {
			return lit(e.Elts)
		}
	}
	return "", false
}
