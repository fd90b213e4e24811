// Package archtest holds Sluice's structure to the rules of
// docs/ARCHITECTURE.md: imports run one way, down the layers; no type has
// more than about 40 methods and no function more than about 100 lines,
// save the ones listed here with their reason. It reads the source, as
// text; it runs nothing of Sluice.
package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/sluicehq/sluice/"

// layers ranks every package of the module: a package may import only
// packages of a higher rank (further down docs/ARCHITECTURE.md's picture).
var layers = map[string]int{
	"cmd/server": 0, "cmd/worker": 0, "cmd/sluice": 0, "cmd/sluice-bench": 0,
	"internal/app": 1, "internal/cli": 1,
	"internal/api": 2, "internal/ui": 2, "internal/rls": 2, "internal/demo": 2,
	"internal/engine": 3, "internal/worker": 3,
	"internal/cluster": 4, "internal/worker/analytics": 4, "internal/worker/configsvc": 4,
	"internal/worker/repl": 4, "internal/worker/webhook": 4, "internal/rlspolicy": 4, "internal/bus/bustest": 4,
	"internal/bus": 5, "internal/limitsfile": 5, "internal/service/servicetest": 5,
	"internal/service": 6,
	"internal/tenants": 7, "internal/reserve": 7, "internal/sqlitedb": 7, "internal/rlsconf": 7,
	"internal/route": 8, "internal/keyed": 8, "internal/netguard": 8,
	"internal/quota": 9, "internal/errs": 9, "internal/httpsec": 9, "internal/logging": 9,
	"internal/tick": 9, "internal/ui/views": 9,
	// Embedded files only: the dashboard's static assets, the SQL migrations.
	"web/static": 10, "migrations": 10,
}

// bigTypes are the types still above maxMethods, each with its reason: a
// debt to pay, not a licence. The test fails when one shrinks below the
// bound (take it off the list) or another grows past it.
var bigTypes = map[string]string{}

// longFuncs are the functions still above maxLines, each with its reason.
// Start-up wiring (flags, routes, a process's run) may be long: it reads
// top to bottom and does one thing after another.
var longFuncs = map[string]string{
	"internal/app.Main.Run":          "start-up wiring of a server process",
	"internal/app.Config.ParseFlags": "start-up wiring: every flag of the server",
	"internal/ui.Register":           "start-up wiring: every route of the dashboard",
	"internal/api.New":               "start-up wiring: every route of the API",
	"internal/worker.New":            "start-up wiring: the worker's store, streams and services",

	"cmd/sluice-bench.runWebhookBench": "a benchmark scenario, read top to bottom",
	"cmd/sluice-bench.workerCase":      "a benchmark scenario, read top to bottom",
	"cmd/sluice-bench.runTenantsBench": "a benchmark scenario, read top to bottom",
	"cmd/sluice-bench.runFlood":        "a benchmark scenario, read top to bottom",
}

const (
	maxMethods = 40
	maxLines   = 100
)

// pkg is one directory's non-test, non-generated Go source.
type pkg struct {
	files []*ast.File
	fset  *token.FileSet
}

func load(t *testing.T) map[string]*pkg {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*pkg{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "sdk" || rel == "e2e" || rel == "web" || rel == "migrations" || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || strings.HasSuffix(name, "_templ.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if out[dir] == nil {
			out[dir] = &pkg{fset: fset}
		}
		out[dir].files = append(out[dir].files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Every package has a layer, and imports only packages below its own.
func TestImportsRunDownwards(t *testing.T) {
	for dir, p := range load(t) {
		rank, ok := layers[dir]
		if !ok {
			t.Errorf("%s has no layer: give it one in layers (internal/archtest) and in docs/ARCHITECTURE.md's picture", dir)
			continue
		}
		for _, f := range p.files {
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				dep, ok := strings.CutPrefix(path, module)
				if !ok || strings.HasPrefix(dep, "sdk") {
					continue
				}
				if r, known := layers[dep]; !known || r <= rank {
					t.Errorf("%s (layer %d) imports %s (layer %d): imports run downwards only (%s)",
						dir, rank, dep, r, p.fset.Position(imp.Pos()))
				}
			}
		}
	}
}

// No type has more than maxMethods methods and no function more than
// maxLines lines, but those listed with their reason; a listed one that
// is back within the bound must leave the list.
func TestSmallTypesAndFunctions(t *testing.T) {
	methods := map[string]int{}
	lines := map[string]int{}
	for dir, p := range load(t) {
		for _, f := range p.files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok {
					continue
				}
				name := fd.Name.Name
				if fd.Recv != nil && len(fd.Recv.List) == 1 {
					typ := recvType(fd.Recv.List[0].Type)
					methods[dir+"."+typ]++
					name = typ + "." + name
				}
				n := p.fset.Position(fd.End()).Line - p.fset.Position(fd.Pos()).Line + 1
				lines[dir+"."+name] = n
			}
		}
	}
	check := func(what string, got map[string]int, bound int, listed map[string]string) {
		var over []string
		for name, n := range got {
			if n > bound {
				over = append(over, name)
				if _, ok := listed[name]; !ok {
					t.Errorf("%s %s has %d, more than %d: split it (docs/ARCHITECTURE.md), or list it with its reason", what, name, n, bound)
				}
			}
		}
		for name := range listed {
			if got[name] <= bound {
				t.Errorf("%s %s is listed as above %d but has %d: take it off the list", what, name, bound, got[name])
			}
		}
		sort.Strings(over)
		for _, name := range over {
			t.Logf("%s %s: %d", what, name, got[name])
		}
	}
	check("type", methods, maxMethods, bigTypes)
	check("function", lines, maxLines, longFuncs)
}

func recvType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return "?"
		}
	}
}
