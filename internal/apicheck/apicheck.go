// Package apicheck lists the exported API of a package, one declaration a
// line, as Go's own api/ files do, so that a change to it shows as a
// change to a checked-in file (api/ at the module's root, compared by the
// root package's TestAPI).
//
// It reads source only (go/parser, go/printer): declarations are printed
// as written, less their comments and bodies, and a struct or interface
// with only its exported fields and methods. It is part of ratelease's
// tests, not a stable API.
package apicheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// List returns the exported API of the package in dir (its non-test Go
// files), sorted, each line starting with "pkg <name>, ".
func List(dir string) ([]string, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var lines []string
	var name string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		af, err := parser.ParseFile(fset, f, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		name = af.Name.Name
		for _, d := range af.Decls {
			lines = append(lines, decl(fset, d)...)
		}
	}
	for i := range lines {
		lines[i] = "pkg " + name + ", " + lines[i]
	}
	sort.Strings(lines)
	return lines, nil
}

// decl returns the lines of d's exported API.
func decl(fset *token.FileSet, d ast.Decl) []string {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return nil
		}
		recv := ""
		if d.Recv != nil {
			t := d.Recv.List[0].Type
			if !exportedRecv(t) {
				return nil
			}
			recv = "(" + node(fset, t) + ") "
		}
		return []string{"func " + recv + d.Name.Name + strings.TrimPrefix(node(fset, d.Type), "func")}
	case *ast.GenDecl:
		var out []string
		// A constant without values repeats the last spec's type and
		// values, at its own iota.
		var lastType ast.Expr
		var lastValues []ast.Expr
		for iota, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if s.Name.IsExported() {
					out = append(out, typeLines(fset, s)...)
				}
			case *ast.ValueSpec:
				typ, values := s.Type, s.Values
				if d.Tok == token.CONST {
					if len(values) == 0 {
						typ, values = lastType, lastValues
					}
					lastType, lastValues = typ, values
				}
				for i, n := range s.Names {
					if !n.IsExported() {
						continue
					}
					line := strings.ToLower(d.Tok.String()) + " " + n.Name
					if typ != nil {
						line += " " + node(fset, typ)
					}
					if i < len(values) && (d.Tok == token.CONST || typ == nil) {
						v := node(fset, values[i])
						line += " = " + v
						if d.Tok == token.CONST && strings.Contains(v, "iota") {
							line += fmt.Sprintf(" (iota = %d)", iota)
						}
					}
					out = append(out, line)
				}
			}
		}
		return out
	}
	return nil
}

// typeLines returns a type's line, and one for each exported field of a
// struct and method of an interface.
func typeLines(fset *token.FileSet, s *ast.TypeSpec) []string {
	head := "type " + s.Name.Name
	if s.TypeParams != nil {
		var ps []string
		for _, f := range s.TypeParams.List {
			var names []string
			for _, n := range f.Names {
				names = append(names, n.Name)
			}
			ps = append(ps, strings.Join(names, ", ")+" "+node(fset, f.Type))
		}
		head += "[" + strings.Join(ps, ", ") + "]"
	}
	if s.Assign.IsValid() {
		head += " ="
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		head += " struct"
		out := []string{head}
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 { // embedded
				if n := node(fset, f.Type); ast.IsExported(strings.TrimLeft(n[strings.LastIndex(n, ".")+1:], "*")) {
					out = append(out, head+", embedded "+n)
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					out = append(out, head+", "+n.Name+" "+node(fset, f.Type))
				}
			}
		}
		return out
	case *ast.InterfaceType:
		head += " interface"
		out := []string{head}
		for _, m := range t.Methods.List {
			for _, n := range m.Names {
				if n.IsExported() {
					out = append(out, head+", "+n.Name+strings.TrimPrefix(node(fset, m.Type), "func"))
				}
			}
			if len(m.Names) == 0 {
				out = append(out, head+", embedded "+node(fset, m.Type))
			}
		}
		return out
	}
	return []string{head + " " + node(fset, s.Type)}
}

// exportedRecv reports whether a method's receiver type is exported.
func exportedRecv(t ast.Expr) bool {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}

// node prints n on one line, without comments.
func node(fset *token.FileSet, n ast.Node) string {
	var b bytes.Buffer
	if err := (&printer.Config{Mode: printer.RawFormat}).Fprint(&b, fset, n); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}
