package tidings_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidings-go/tidings/relay"
)

const modulePath = "github.com/tidings-go/tidings"

// importRule is a row of README.md's dependency table (section
// "Packages"): what of the module the packages pkg matches may import.
// Paths are relative to the module root ("" is the package tidings);
// "x/..." is x and every package below it; "..." is anything. The first
// rule that matches a package applies; a package no rule matches fails
// the test until the table gets a row for it.
type importRule struct {
	pkg []string
	may []string
}

// readImportRules reads the dependency table of README.md.
func readImportRules(t *testing.T) []importRule {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(readme), "\n| package | may import |\n| --- | --- |\n")
	require.True(t, ok, "README.md has the dependency table")
	quoted := regexp.MustCompile("`([^`]+)`")
	paths := func(cell string) []string {
		var ps []string
		for _, m := range quoted.FindAllStringSubmatch(cell, -1) {
			ps = append(ps, strings.TrimPrefix(strings.TrimPrefix(m[1], "tidings"), "/"))
		}
		return ps
	}
	var rules []importRule
	for line := range strings.Lines(table) {
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) != 4 {
			break
		}
		r := importRule{pkg: paths(cells[1]), may: paths(cells[2])}
		switch strings.TrimSpace(cells[2]) {
		case "anything":
			r.may = []string{"..."}
		case "nothing":
		default:
			require.NotEmpty(t, r.may, "README.md, dependency table: %q", line)
		}
		require.NotEmpty(t, r.pkg, "README.md, dependency table: %q", line)
		rules = append(rules, r)
	}
	require.NotEmpty(t, rules)
	return rules
}

func matchPkg(pattern, rel string) bool {
	if pattern == "..." {
		return true
	}
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == dir || strings.HasPrefix(rel, dir+"/")
	}
	return rel == pattern
}

// mayImport reports whether package from may import package to (both
// relative to the module root), and false with an error when no rule
// covers from.
func mayImport(rules []importRule, from, to string) (bool, error) {
	for _, r := range rules {
		if !slices.ContainsFunc(r.pkg, func(p string) bool { return matchPkg(p, from) }) {
			continue
		}
		for _, m := range r.may {
			if matchPkg(m, to) {
				return true, nil
			}
		}
		return false, nil
	}
	return false, errors.New("no row of README.md's dependency table matches it")
}

func relPath(importPath string) (string, bool) {
	if importPath == modulePath {
		return "", true
	}
	return strings.CutPrefix(importPath, modulePath+"/")
}

func displayPath(rel string) string {
	if rel == "" {
		return "tidings"
	}
	return rel
}

// listedPackage is what the test reads of `go list -json`.
type listedPackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
	Module     *struct{ Path string }
}

// listPackages returns the packages of this module, as `go list -deps`
// reports them.
func listPackages(t *testing.T) []listedPackage {
	t.Helper()
	var pkgs []listedPackage
	for _, p := range listDeps(t, "./...") {
		if p.Module != nil && p.Module.Path == modulePath {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs
}

// listDeps returns the packages that `go list -deps` reports for args
// (flags and patterns): those named and every package they need.
func listDeps(t *testing.T, args ...string) []listedPackage {
	t.Helper()
	// go test puts its own go command first on PATH.
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"list", "-deps", "-json"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())

	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestImportRules(t *testing.T) {
	t.Parallel()
	rules := readImportRules(t)

	t.Run("ModulePackages", func(t *testing.T) {
		t.Parallel()
		seen := map[string]bool{}
		var wrong []string
		for _, p := range listPackages(t) {
			from, ok := relPath(p.ImportPath)
			require.True(t, ok, p.ImportPath)
			seen[from] = true
			if _, err := mayImport(rules, from, ""); err != nil {
				wrong = append(wrong, displayPath(from)+": "+err.Error())
				continue
			}
			for _, imp := range p.Imports {
				to, ok := relPath(imp)
				if !ok {
					continue
				}
				if allowed, _ := mayImport(rules, from, to); !allowed {
					wrong = append(wrong, displayPath(from)+" imports "+displayPath(to))
				}
			}
		}
		for _, pkg := range []string{"", "relay", "inbox", "delivery", "internal/pgtest"} {
			require.True(t, seen[pkg], "go list did not report %s", displayPath(pkg))
		}
		require.Empty(t, wrong, "imports that point the wrong way (see README.md, Packages)")
	})

	// The rules themselves, including for packages that do not exist yet.
	t.Run("Rules", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			from, to string
			ok       bool
		}{
			{"", "relay", true},
			{"", "inbox", true},
			{"", "internal/migrate", true},
			{"", "notification", true},
			{"", "delivery/mail", false},
			{"relay", "internal/ident", true},
			{"relay", "inbox", false},
			{"relay", "notification", false},
			{"relay", "delivery", false},
			{"relay", "", false},
			{"relay", "dbtx", true},
			{"dbtx", "internal/ident", false},
			{"relay/relaytest", "relay", true},
			{"relay/relaytest", "notification", false},
			{"notification/notificationtest", "", true},
			{"delivery/inapp", "dbtx", true},
			{"delivery", "dbtx", false},
			{"inbox", "internal/ident", true},
			{"inbox", "relay", false},
			{"retrypolicy", "delivery", false},
			{"delivery", "notification", false},
			{"delivery", "delivery/mail", false},
			{"delivery", "retrypolicy", false},
			{"delivery/mail", "delivery", true},
			{"delivery/mail", "notification", false},
			{"delivery/mail", "relay", false},
			{"delivery/mail", "delivery/sms", false},
			{"delivery/mail", "retrypolicy", false},
			{"delivery/mail", "delivery/internal/httpcall", true},
			{"delivery/inapp", "internal/migrate", true},
			{"delivery/internal/httpcall", "delivery", true},
			{"delivery/internal/httpcall", "notification", false},
			{"recording", "delivery", true},
			{"recording", "relay", false},
			{"recording", "notification", false},
			{"notification", "relay", true},
			{"notification", "inbox", true},
			{"notification", "delivery", true},
			{"notification", "retrypolicy", true},
			{"notification", "internal/ident", true},
			{"notification", "delivery/mail", false},
			{"notification", "recording", false},
			{"notification", "", false},
			{"notification/feedback", "notification", false},
			{"notification/feedback", "relay", false},
			{"notification/feedback", "delivery", false},
			{"notification/feedback", "internal/ident", false},
			{"notification/console", "notification", true},
			{"notification/console", "relay", true},
			{"notification/console", "delivery", false},
			{"notification/console", "recording", false},
			{"notification", "notification/console", false},
			{"internal/pgtest", "internal/pgtemp", true},
			{"internal/pgtest", "relay", false},
			{"internal/testkit", "inbox", false},
			{"internal/testkit", "notification", false},
			{"internal/testkit", "delivery", false},
			{"internal/testkit", "recording", false},
			{"internal/testkit", "", false},
			{"examples/welcome", "notification", true},
			{"examples/welcome", "delivery/mail", true},
			{"examples", "relay", true},
			{"cmd/tidings", "relay", true},
		} {
			allowed, err := mayImport(rules, tc.from, tc.to)
			require.NoError(t, err, "%s", displayPath(tc.from))
			require.Equal(t, tc.ok, allowed, "%s imports %s", displayPath(tc.from), displayPath(tc.to))
		}
		_, err := mayImport(rules, "newpkg", "relay")
		require.Error(t, err, "a package without a rule")
	})
}

// testOnlyModules are modules that only tests may import: the browser
// driver of the operator console's tests, and the migration tools whose
// layouts of the SQL the tests run (tidings.MigrationFiles makes the files
// without them). A service that imports the library, and the module's
// commands, build none of them.
var testOnlyModules = []string{
	"github.com/chromedp/cdproto",
	"github.com/chromedp/chromedp",
	"github.com/golang-migrate/migrate/v4",
	"github.com/pressly/goose/v3",
}

func TestTestOnlyModules(t *testing.T) {
	t.Parallel()

	// modules returns which of testOnlyModules pkgs hold a package of.
	modules := func(pkgs []listedPackage) []string {
		var found []string
		for _, p := range pkgs {
			if p.Module != nil && slices.Contains(testOnlyModules, p.Module.Path) && !slices.Contains(found, p.Module.Path) {
				found = append(found, p.Module.Path)
			}
		}
		slices.Sort(found)
		return found
	}

	t.Run("NotInTheModulesPackages", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, modules(listDeps(t, "./...")), "a package of the module (not a test) imports a test-only module")
	})

	// The same check sees them once the tests' imports count.
	t.Run("InTheTests", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, testOnlyModules, modules(listDeps(t, "-test", ".", "./notification/console")))
	})
}

// relayWords are what the relay must never speak of: it moves opaque
// records (STYLE.md, section 2).
var relayWords = regexp.MustCompile(`(?i)notification|recipient|channel`)

// TestRelayKnowsNoNotification checks the relay's exported API (names,
// signatures, fields, methods and constant values) and its SQL (tables,
// columns, statements; comments left out) for relayWords.
func TestRelayKnowsNoNotification(t *testing.T) {
	t.Parallel()

	t.Run("GoDocShort", func(t *testing.T) {
		t.Parallel()
		cmd := exec.CommandContext(t.Context(), "go", "doc", "-short", "./relay")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "go doc: %s", stderr.String())
		require.NotEmpty(t, out)
		for line := range strings.Lines(string(out)) {
			require.False(t, relayWords.MatchString(line), "relay API: %s", strings.TrimSpace(line))
		}
	})

	t.Run("ExportedAPI", func(t *testing.T) {
		t.Parallel()
		var dir string
		var files []string
		for _, p := range listPackages(t) {
			if p.ImportPath == modulePath+"/relay" {
				dir, files = p.Dir, p.GoFiles
			}
		}
		require.NotEmpty(t, files)
		fset := token.NewFileSet()
		var parsed []*ast.File
		for _, name := range files {
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			parsed = append(parsed, f)
		}
		// Mode 0 keeps exported declarations only, without unexported
		// fields and methods.
		pkg, err := doc.NewFromFiles(fset, parsed, modulePath+"/relay")
		require.NoError(t, err)

		var found []string
		check := func(where string, nodes ...ast.Node) {
			for _, n := range nodes {
				ast.Inspect(n, func(n ast.Node) bool {
					switch n := n.(type) {
					case *ast.BlockStmt: // a body is not API
						return false
					case *ast.Ident:
						if relayWords.MatchString(n.Name) {
							found = append(found, where+": "+n.Name)
						}
					case *ast.BasicLit:
						if s, err := strconv.Unquote(n.Value); err == nil && relayWords.MatchString(s) {
							found = append(found, where+": "+n.Value)
						}
					}
					return true
				})
			}
		}
		values := func(where string, vs []*doc.Value) {
			for _, v := range vs {
				check(where+" "+strings.Join(v.Names, ", "), v.Decl)
			}
		}
		values("const", pkg.Consts)
		values("var", pkg.Vars)
		for _, f := range pkg.Funcs {
			check("func "+f.Name, f.Decl)
		}
		for _, typ := range pkg.Types {
			check("type "+typ.Name, typ.Decl)
			values("const", typ.Consts)
			values("var", typ.Vars)
			for _, f := range typ.Funcs {
				check("func "+f.Name, f.Decl)
			}
			for _, m := range typ.Methods {
				check("method "+typ.Name+"."+m.Name, m.Decl)
			}
		}
		require.Empty(t, found, "the relay's API speaks of notifications")
	})

	t.Run("SQL", func(t *testing.T) {
		t.Parallel()
		comment := regexp.MustCompile(`--[^\n]*`)
		var sqlFiles []string
		require.NoError(t, fs.WalkDir(relay.Migrations(), ".", func(name string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			body, err := fs.ReadFile(relay.Migrations(), name)
			if err != nil {
				return err
			}
			sqlFiles = append(sqlFiles, name)
			for line := range strings.Lines(comment.ReplaceAllString(string(body), "")) {
				require.False(t, relayWords.MatchString(line), "%s: %s", name, strings.TrimSpace(line))
			}
			return nil
		}))
		require.NotEmpty(t, sqlFiles)

		// The statements, all in relay/sql.go: its string literals.
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join("relay", "sql.go"), nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		literals := 0
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			require.NoError(t, err)
			literals++
			s = comment.ReplaceAllString(s, "")
			require.False(t, relayWords.MatchString(s), "relay/sql.go:%d: %s", fset.Position(lit.Pos()).Line, s)
			return true
		})
		require.NotZero(t, literals)
	})
}

// driverModules are the PostgreSQL drivers a service may use, one or the
// other: a service on one never builds the other.
const (
	libPQ = "github.com/lib/pq"
	pgx   = "github.com/jackc/pgx/v5"
)

// TestDriversStayApart checks, with go list -deps, that the library's
// packages import no driver, so that a service gets only the one it
// chose: lib/pq through relay/pqlisten, pgx through relay/pgxlisten and
// dbtx/pgxtx, and the pgx example service builds without lib/pq.
func TestDriversStayApart(t *testing.T) {
	t.Parallel()
	drivers := func(pkgs ...string) []string {
		var found []string
		for _, p := range listDeps(t, pkgs...) {
			if p.Module != nil && (p.Module.Path == libPQ || p.Module.Path == pgx) && !slices.Contains(found, p.Module.Path) {
				found = append(found, p.Module.Path)
			}
		}
		slices.Sort(found)
		return found
	}
	for _, c := range []struct {
		pkgs []string
		want []string
	}{
		{[]string{".", "./dbtx", "./inbox", "./relay", "./relay/relaytest", "./notification", "./notification/notificationtest",
			"./notification/feedback", "./notification/console", "./delivery/...", "./retrypolicy", "./recording"}, nil},
		{[]string{"./relay/pqlisten"}, []string{libPQ}},
		{[]string{"./relay/pgxlisten", "./dbtx/pgxtx"}, []string{pgx}},
		{[]string{"./examples/pgx/..."}, []string{pgx}},
	} {
		t.Run(strings.Join(c.pkgs, ","), func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, drivers(c.pkgs...))
		})
	}
}
