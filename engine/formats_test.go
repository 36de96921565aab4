package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"
)

// Every Format constant of the package has its entry in the formats table,
// so no format silently gets another's platform, file name or extension.
func TestEveryFormatInTheTable(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "detect.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		vs, ok := node.(*ast.ValueSpec)
		if !ok {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Format" {
			return true
		}
		for _, name := range vs.Names {
			n++
			lit := vs.Values[0].(*ast.BasicLit).Value
			fmt := Format(lit[1 : len(lit)-1])
			info, ok := fmt.Info()
			if !ok || info.Platform == "" || info.Backend == "" || info.RepositoryFile == "" || info.RegistryExt == "" || info.Runtime == "" {
				t.Errorf("%s (%q) has no complete entry in the formats table: %+v", name.Name, fmt, info)
			}
		}
		return true
	})
	if n < len(formats) {
		t.Fatalf("found %d Format constants in detect.go, the table has %d", n, len(formats))
	}
	if _, ok := Format("tensorflow").Info(); ok {
		t.Fatal("an unknown format has an entry")
	}
}
